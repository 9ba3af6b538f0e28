package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHTTP10AnswerWithoutLength: an HTTP/1.0 answer whose body ends with
// the connection (what Go's TLS server answers a plaintext request) reaches
// a keep-alive HTTP/1.1 client whole, and the connection stays usable.
func TestHTTP10AnswerWithoutLength(t *testing.T) {
	url := gatewayToRaw(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		_, _ = c.Write([]byte("HTTP/1.0 400 Bad Request\r\nX-Up: raw\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"))
	})
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range 3 { // the same keep-alive connection
		resp, err := c.Get(url + "/")
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

// TestHTTP10AnswerGoesOutAsHTTP11: an HTTP/1.0 upstream (Python's
// http.server) answered with a length: the client gets HTTP/1.1 and keeps
// its connection, so a sidecar's client side keeps its TLS connection to
// the server's side instead of a handshake per call.
func TestHTTP10AnswerGoesOutAsHTTP11(t *testing.T) {
	url := gatewayToRaw(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		_, _ = c.Write([]byte("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 3 { // one connection
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Proto != "HTTP/1.1" || resp.Close || string(b) != "ok" {
			t.Fatalf("call %d: %s close=%v %q", i, resp.Proto, resp.Close, b)
		}
	}
}

// gatewayToRaw serves handle on each connection of a loopback listener (an
// endpoint written byte by byte) behind a gateway that routes every call
// to it, and returns the gateway's URL.
func gatewayToRaw(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	tcp := ln.Addr().(*net.TCPAddr)
	u := &upstream{name: "raw", addr: ln.Addr().String(), host: tcp.IP.String(), port: uint32(tcp.Port)}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "a"))), edsCluster("a"), assignment("a", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	return g.url
}
