package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// TestHostPortMustBeAPort: a Host whose part after the last ':' is not a
// port answers 400 and reaches no upstream. The virtual host is picked
// with what follows ':' dropped while AuthorizationPolicies match the Host
// whole, so "shop.example.com:" routed to shop.example.com past every
// policy scoped to its hosts. A Host with a port, without one, or an IPv6
// literal is routed as before.
func TestHostPortMustBeAPort(t *testing.T) {
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "up"))), edsCluster("up"), assignment("up", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	pu, _ := url.Parse(g.url)
	status := func(host string) int {
		t.Helper()
		c, err := net.DialTimeout("tcp", pu.Host, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("Host %q: %v", host, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for host, want := range map[string]int{
		"shop.example.com":        200,
		"shop.example.com:8080":   200,
		"[::1]:8080":              200,
		"[::1]":                   200,
		"shop.example.com:":       400,
		"shop.example.com:x":      400,
		"shop.example.com:80a":    400,
		"shop.example.com:123456": 400,
	} {
		if got := status(host); got != want {
			t.Errorf("Host %q: %d, want %d", host, got, want)
		}
	}
	before := u.calls.Load()
	if got := status("shop.example.com:"); got != 400 || u.calls.Load() != before {
		t.Errorf("a bad Host port reached the upstream (status %d)", got)
	}
}
