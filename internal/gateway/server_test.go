package gateway_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// TestTricklingClientIsCutOff: a client that sends a request's headers a
// line at a time never finishes the request; the gateway closes its
// connection once RequestReadTimeout has passed since the first byte,
// instead of holding a goroutine and a socket for as long as it trickles.
func TestTricklingClientIsCutOff(t *testing.T) {
	g := gateway.New(gateway.Options{RequestReadTimeout: 300 * time.Millisecond})
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
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: a\r\n")); err != nil {
		t.Fatal(err)
	}
	// Trickle a header line every 50 ms for at most 5 s; the gateway must
	// close the connection long before that.
	closed := false
	for i := 0; i < 100 && !closed; i++ {
		time.Sleep(50 * time.Millisecond)
		if _, err := c.Write([]byte("X-Trickle: 1\r\n")); err != nil {
			closed = true
			break
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [512]byte
		if n, err := c.Read(b[:]); n > 0 || err != nil && !isTimeout(err) {
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
	t.Logf("cut off after %v", took)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
