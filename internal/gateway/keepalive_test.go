package gateway_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// serveBare serves a gateway without configuration (every request gets a
// local answer) on a loopback port.
func serveBare(t testing.TB, opts gateway.Options) string {
	t.Helper()
	g := gateway.New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

// Pipelined requests, sent in one write before any answer, are each
// answered: a read never waits for bytes that are already buffered.
func TestPipelinedRequestsAnswered(t *testing.T) {
	addr := serveBare(t, gateway.Options{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 5
	var reqs []byte
	for range n {
		reqs = append(reqs, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"...)
	}
	if _, err := c.Write(reqs); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i := range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d of %d: %v", i+1, n, err)
		}
		resp.Body.Close()
	}
}
