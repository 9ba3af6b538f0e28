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
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// connSpan is when an upstream connection carried its first and last
// call, and how many it carried.
type connSpan struct {
	first, last time.Time
	n           int
}

// connLog is what an endpoint saw of the gateway's connections to it.
type connLog struct {
	mu    sync.Mutex
	conns map[string]*connSpan // by the gateway's address
}

func (l *connLog) take() map[string]*connSpan {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.conns
	l.conns = map[string]*connSpan{}
	return m
}

// startPooled starts an endpoint (HTTP/1.1, or h2c) that logs the
// connections its calls come on, and a gateway whose cluster for it has
// common's per-connection settings; body is what its calls answer.
func startPooled(t *testing.T, h2 bool, common *core.HttpProtocolOptions) (g *gw, log *connLog, body string) {
	t.Helper()
	log = &connLog{conns: map[string]*connSpan{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		log.mu.Lock()
		if s := log.conns[r.RemoteAddr]; s != nil {
			s.last = now
			s.n++
		} else {
			log.conns[r.RemoteAddr] = &connSpan{now, now, 1}
		}
		log.mu.Unlock()
		io.WriteString(w, "pooled "+r.Proto)
	})}
	if h2 {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	u := &upstream{name: "pooled", addr: ln.Addr().String(), host: "127.0.0.1", port: uint32(ln.Addr().(*net.TCPAddr).Port)}
	c := edsCluster(u.name, func(c *cluster.Cluster) { c.CommonHttpProtocolOptions = common })
	body = "pooled HTTP/1.1"
	if h2 {
		opts, _ := anypb.New(&upstreamhttp.HttpProtocolOptions{CommonHttpProtocolOptions: common,
			UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
				ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{}}}})
		c = edsCluster(u.name, func(c *cluster.Cluster) {
			c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
		})
		body = "pooled HTTP/2.0"
	}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", u.name))), c, assignment(u.name, ep{u: u}))
	g = startGateway(t, cp.addr)
	g.waitServes(t, "/", body)
	log.take()
	return g, log, body
}

var pooledProtocols = []struct {
	name string
	h2   bool
}{{"http1", false}, {"h2c", true}}

// TestMaxConnectionDuration: a cluster's max_connection_duration retires
// its connections to the endpoints once that time has passed since they
// were dialed, HTTP/1.1 (fasthttp's pool enforces it only in its own
// client, which the gateway does not use) and HTTP/2 alike: calls one
// after another for three durations take at least three connections,
// none carrying calls for much longer than the duration.
func TestMaxConnectionDuration(t *testing.T) {
	const maxAge = 500 * time.Millisecond
	for _, p := range pooledProtocols {
		t.Run(p.name, func(t *testing.T) {
			g, log, want := startPooled(t, p.h2, &core.HttpProtocolOptions{MaxConnectionDuration: durationpb.New(maxAge)})
			start := time.Now()
			for i := 0; i < 300 && time.Since(start) < 3*maxAge+100*time.Millisecond; i++ {
				if code, body, _ := g.get(t, "/"); code != 200 || body != want {
					t.Fatalf("call %d: %d %q", i, code, body)
				}
				time.Sleep(10 * time.Millisecond)
			}
			conns := log.take()
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

// TestMaxRequestsPerConnection: a cluster's max_requests_per_connection (a
// DestinationRule's http.maxRequestsPerConnection) ends each connection to
// an endpoint after that many calls, HTTP/1.1 and HTTP/2 alike (an HTTP/2
// connection takes no new stream after its last and closes once drained).
func TestMaxRequestsPerConnection(t *testing.T) {
	const per, calls = 3, 10
	for _, p := range pooledProtocols {
		t.Run(p.name, func(t *testing.T) {
			g, log, want := startPooled(t, p.h2, &core.HttpProtocolOptions{MaxRequestsPerConnection: wrapperspb.UInt32(per)})
			for i := range calls {
				if code, body, _ := g.get(t, "/"); code != 200 || body != want {
					t.Fatalf("call %d: %d %q", i, code, body)
				}
			}
			conns, n := log.take(), 0
			for addr, s := range conns {
				n += s.n
				if s.n > per {
					t.Errorf("connection %s carried %d calls, max_requests_per_connection %d", addr, s.n, per)
				}
			}
			if n != calls || len(conns) != (calls+per-1)/per {
				t.Errorf("%d calls on %d connections, want %d on %d", n, len(conns), calls, (calls+per-1)/per)
			}
		})
	}
}

// TestUpstreamIdleTimeout: a cluster's idle_timeout (a DestinationRule's
// http.idleTimeout) closes its pooled connections that sat idle that long,
// HTTP/1.1 and HTTP/2: calls close together share a connection, a call
// after a longer pause gets a new one.
func TestUpstreamIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	for _, p := range pooledProtocols {
		t.Run(p.name, func(t *testing.T) {
			g, log, want := startPooled(t, p.h2, &core.HttpProtocolOptions{IdleTimeout: durationpb.New(idle)})
			call := func() {
				t.Helper()
				if code, body, _ := g.get(t, "/"); code != 200 || body != want {
					t.Fatalf("%d %q", code, body)
				}
			}
			time.Sleep(idle + 200*time.Millisecond) // waitServes's connection goes
			call()
			call()
			before := log.take()
			if len(before) != 1 {
				t.Errorf("two calls in a row took %d connections, want 1", len(before))
			}
			// The idle cleaner closes a connection from idle to twice idle
			// after its last call (fasthttp's sleeps up to idle between
			// rounds).
			time.Sleep(3*idle + 200*time.Millisecond)
			call()
			conns := log.take()
			if len(conns) != 1 {
				t.Fatalf("one call: %d connections", len(conns))
			}
			for addr := range conns {
				if _, same := before[addr]; same {
					t.Errorf("a call after %v idle took the idle connection %s, want a new one", 3*idle+200*time.Millisecond, addr)
				}
			}
			call()
			again := log.take()
			for addr := range again {
				if _, same := conns[addr]; !same {
					t.Errorf("a call right after another took a new connection %s", addr)
				}
			}
		})
	}
}
