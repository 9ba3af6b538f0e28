package gateway_test

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// TestServicePort: a per-service port routes every call as one to its
// service, whatever Host the caller sent, through the proxy listener's
// routes; the proxy port itself still routes by Host.
func TestServicePort(t *testing.T) {
	a := startUpstream(t, "a", nil)
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("orders", []string{"orders.test"}, prefixRoute("/", "a"))),
		edsCluster("a"), assignment("a", ep{u: a}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=a", "Host", "orders.test")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.g.ServeService(ln, "orders.test") }()
	t.Cleanup(func() { ln.Close(); <-done })
	for _, host := range []string{"", "elsewhere.test"} {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/x", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "upstream=a path=/x" {
			t.Errorf("service port, Host %q: %d %q", host, resp.StatusCode, b)
		}
	}
	if code, _, _ := g.get(t, "/x", "Host", "elsewhere.test"); code != 404 {
		t.Errorf("the proxy port, Host elsewhere.test: %d, want 404", code)
	}
}
