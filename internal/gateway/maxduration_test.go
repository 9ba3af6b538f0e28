package gateway_test

import (
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestMaxConnectionDuration: a cluster's max_connection_duration retires
// its connections to the endpoints once that time has passed since they
// were dialed, HTTP/1.1 (fasthttp's pool enforces it only in its own
// client, which the gateway does not use) and HTTP/2 alike: calls one
// after another for three durations take at least three connections,
// none carrying calls for much longer than the duration.
func TestMaxConnectionDuration(t *testing.T) {
	const maxAge = 500 * time.Millisecond
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "h2c"}[h2], func(t *testing.T) {
			type span struct{ first, last time.Time }
			var mu sync.Mutex
			conns := map[string]*span{}
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				now := time.Now()
				mu.Lock()
				if s := conns[r.RemoteAddr]; s != nil {
					s.last = now
				} else {
					conns[r.RemoteAddr] = &span{now, now}
				}
				mu.Unlock()
				io.WriteString(w, "aged "+r.Proto)
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: handler}
			if h2 {
				srv.Protocols = new(http.Protocols)
				srv.Protocols.SetUnencryptedHTTP2(true)
			}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			u := &upstream{name: "aged", addr: ln.Addr().String(), host: "127.0.0.1", port: uint32(ln.Addr().(*net.TCPAddr).Port)}
			common := &core.HttpProtocolOptions{MaxConnectionDuration: durationpb.New(maxAge)}
			c := edsCluster(u.name, func(c *cluster.Cluster) { c.CommonHttpProtocolOptions = common })
			want := "aged HTTP/1.1"
			if h2 {
				opts, _ := anypb.New(&upstreamhttp.HttpProtocolOptions{CommonHttpProtocolOptions: common,
					UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
						ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
							ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{}}}})
				c = edsCluster(u.name, func(c *cluster.Cluster) {
					c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
				})
				want = "aged HTTP/2.0"
			}
			cp := startControlPlane(t, "")
			cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", u.name))), c, assignment(u.name, ep{u: u}))
			g := startGateway(t, cp.addr)
			g.waitServes(t, "/", want)
			mu.Lock()
			clear(conns)
			mu.Unlock()
			start := time.Now()
			for i := 0; i < 300 && time.Since(start) < 3*maxAge+100*time.Millisecond; i++ {
				if code, body, _ := g.get(t, "/"); code != 200 || body != want {
					t.Fatalf("call %d: %d %q", i, code, body)
				}
				time.Sleep(10 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(conns) < 3 {
				t.Errorf("%v of calls took %d upstream connections, want at least 3 (max_connection_duration %v)", time.Since(start), len(conns), maxAge)
			}
			for addr, s := range conns {
				// A call that began within the duration may end after it.
				if d := s.last.Sub(s.first); d > maxAge+400*time.Millisecond {
					t.Errorf("connection %s carried calls for %v, max_connection_duration %v", addr, d, maxAge)
				}
			}
		})
	}
}
