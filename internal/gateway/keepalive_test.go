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
func serveBare(t *testing.T, opts gateway.Options) string {
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

// A kept-alive connection's second request that trickles is cut off
// after RequestReadTimeout, as a first one is (TestTricklingClientIsCutOff):
// the idle timeout between requests does not stand in for the read timeout.
func TestTricklingSecondRequestIsCutOff(t *testing.T) {
	addr := serveBare(t, gateway.Options{RequestReadTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if _, err := c.Write([]byte("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	start := time.Now()
	if _, err := c.Write([]byte("GET /b HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	closed := false
	for i := 0; i < 100 && !closed; i++ {
		time.Sleep(50 * time.Millisecond)
		if _, err := c.Write([]byte("X-Trickle: 1\r\n")); err != nil {
			closed = true
			break
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := br.Peek(1); err == nil || !isTimeout(err) {
			closed = true // an answer (408) or EOF: the request was cut off
		}
	}
	took := time.Since(start)
	if !closed {
		t.Fatalf("the connection was still open after trickling headers for %v", took)
	}
	if took > 3*time.Second {
		t.Fatalf("cut off after %v, want about the 300 ms read timeout", took)
	}
}
