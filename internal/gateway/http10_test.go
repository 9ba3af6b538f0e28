package gateway_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestHTTP10AnswerWithoutLength: an HTTP/1.0 answer whose body ends with
// the connection (what Go's TLS server answers a plaintext request) reaches
// a keep-alive HTTP/1.1 client whole, and the connection stays usable.
func TestHTTP10AnswerWithoutLength(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				_, _ = c.Write([]byte("HTTP/1.0 400 Bad Request\r\nX-Up: raw\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"))
			}()
		}
	}()
	tcp := ln.Addr().(*net.TCPAddr)
	u := &upstream{name: "raw", addr: ln.Addr().String(), host: tcp.IP.String(), port: uint32(tcp.Port)}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "a"))), edsCluster("a"), assignment("a", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range 3 { // the same keep-alive connection
		resp, err := c.Get(g.url + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 400 || string(b) != "Client sent an HTTP request to an HTTPS server.\n" || resp.Header.Get("X-Up") != "raw" {
			t.Fatalf("call %d: %d %q %v %v", i, resp.StatusCode, b, err, resp.Header)
		}
	}
}
