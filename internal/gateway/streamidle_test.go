package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// streamingUpstream answers /stall-head never (until the test ends),
// /stall-body with a first line and then nothing, and /trickle?every=D&n=N
// with N lines (default 10) D apart. h2c serves it over HTTP/2 with prior knowledge.
func streamingUpstream(t *testing.T, h2c bool) *upstream {
	t.Helper()
	done := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := w.(http.Flusher)
		switch strings.TrimPrefix(r.URL.Path, "/patient") {
		case "/stall-head":
			select {
			case <-done:
			case <-r.Context().Done():
			}
		case "/stall-body":
			fmt.Fprintln(w, "first")
			f.Flush()
			select {
			case <-done:
			case <-r.Context().Done():
			}
		case "/trickle":
			every, _ := time.ParseDuration(r.URL.Query().Get("every"))
			n := 10
			fmt.Sscan(r.URL.Query().Get("n"), &n)
			for i := range n {
				fmt.Fprintf(w, "line %d\n", i)
				f.Flush()
				select {
				case <-time.After(every):
				case <-r.Context().Done():
					return
				case <-done:
					return
				}
			}
		}
	})}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = &p
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { close(done); srv.Close() })
	tcp := ln.Addr().(*net.TCPAddr)
	return &upstream{name: "stream", host: tcp.IP.String(), port: uint32(tcp.Port)}
}

// TestStreamIdleTimeout: with the route's timeout off (0s), the HTTP
// connection manager's stream_idle_timeout (1.5 s) ends a call whose
// endpoint sends nothing: 504 while waiting for the answer's head, the
// stream cut once the body stops (recorded as upstream_timeout); a body
// that keeps coming (a line every 100ms, 1 s in all) is not idle; a
// route's idle_timeout overrides the listener's. Over HTTP/1.1 and HTTP/2
// (h2c) to the endpoint.
func TestStreamIdleTimeout(t *testing.T) {
	for _, h2c := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "h2c"}[h2c], func(t *testing.T) {
			t.Parallel()
			u := streamingUpstream(t, h2c)
			l := rdsListener("gw", "r")
			m := new(hcm.HttpConnectionManager)
			_ = l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(m)
			m.StreamIdleTimeout = durationpb.New(1500 * time.Millisecond)
			a, _ := anypb.New(m)
			l.FilterChains[0].Filters[0].ConfigType = &listener.Filter_TypedConfig{TypedConfig: a}
			noTimeout := func(prefix string, idle time.Duration) *route.Route {
				r := prefixRoute(prefix, "stream")
				r.GetRoute().Timeout = durationpb.New(0)
				if idle > 0 {
					r.GetRoute().IdleTimeout = durationpb.New(idle)
				}
				return r
			}
			var mods []func(*cluster.Cluster)
			if h2c {
				opts, _ := anypb.New(&upstreamhttp.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
					ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
						ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{}}}})
				mods = append(mods, func(c *cluster.Cluster) {
					c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
				})
			}
			cp := startControlPlane(t, "")
			cp.set(l, routeConfig("r", vhost("all", []string{"*"}, noTimeout("/patient/", 5*time.Second), noTimeout("/", 0))),
				edsCluster("stream", mods...), assignment("stream", ep{u: u}))
			g := startGateway(t, cp.addr)
			c := &http.Client{Timeout: 30 * time.Second}
			waitFor(t, "config", func() bool {
				resp, err := c.Get(g.url + "/trickle?every=1ms")
				if err != nil {
					return false
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode == 200 && strings.Contains(string(b), "line 9")
			})

			// No answer's head: 504 (nothing else would end it: no route timeout).
			resp, err := c.Get(g.url + "/stall-head")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusGatewayTimeout {
				t.Errorf("stall-head: %d, want 504", resp.StatusCode)
			}

			// The body stops: the client gets the first line, then the
			// stream breaks.
			resp, err = c.Get(g.url + "/stall-body")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "first\n" || err == nil {
				t.Errorf("stall-body: %d %q %v (want the first line, then a broken stream)", resp.StatusCode, b, err)
			}

			// A line every 100ms for 1 s: never idle for 1.5 s (the margin is
			// wide: a loaded machine stalled 400ms between two lines).
			resp, err = c.Get(g.url + "/trickle?every=100ms")
			if err != nil {
				t.Fatal(err)
			}
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !strings.HasSuffix(string(b), "line 9\n") {
				t.Errorf("trickle every 100ms: %q %v", b, err)
			}
			// A line every 3 s: idle for the listener's 1.5 s, not for the
			// /patient/ route's idle_timeout of 5 s.
			resp, err = c.Get(g.url + "/patient/trickle?every=3s&n=2")
			if err != nil {
				t.Fatal(err)
			}
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !strings.HasSuffix(string(b), "line 1\n") {
				t.Errorf("route idle_timeout 5s, a line every 3s: %q %v", b, err)
			}
			if b := readAll(t, c, g.url+"/trickle?every=3s&n=2"); strings.Contains(b, "line 1") {
				t.Errorf("listener stream_idle_timeout 1.5s, a line every 3s: got to the end: %q", b)
			}

			waitFor(t, "records", func() bool {
				n := 0
				for _, call := range g.calls(t, "stream") {
					if call.Reason == "upstream_timeout" {
						n++
					}
				}
				return n >= 3 // stall-head, stall-body, trickle every 3 s
			})
		})
	}
}

// readAll returns what a GET of url read before its body ended or broke.
func readAll(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
