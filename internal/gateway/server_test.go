package gateway_test

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// TestTricklingClientIsCutOff: a client that sends a request's headers a
// line at a time never finishes the request; the gateway closes its
// connection once RequestReadTimeout has passed since the first byte,
// instead of holding a goroutine and a socket for as long as it trickles.
func TestTricklingClientIsCutOff(t *testing.T) {
	addr := serveBare(t, gateway.Options{RequestReadTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	trickleUntilCut(t, c, bufio.NewReader(c))
}

// A kept-alive connection's second request that trickles is cut off
// after RequestReadTimeout, as a first one is: the idle timeout between
// requests does not stand in for the read timeout.
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
	trickleUntilCut(t, c, br)
}

// trickleUntilCut starts a request on c and sends a header line every 50
// ms for at most 5 s; the gateway must close the connection (or answer)
// within about its 300 ms read timeout.
func trickleUntilCut(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: a\r\n")); err != nil {
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
	t.Logf("cut off after %v", took)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
