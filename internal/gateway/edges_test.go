package gateway_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// TestHTTPEdges: the plaintext and the TLS port answer the edges of
// HTTP/1.1 alike, at once, as nginx does: bare-LF line endings 400 (they
// hung until the read timeout: 408 in plaintext, nothing over TLS),
// HTTP/9.9 505 (it was served as 1.0 on one port and reached the
// upstream on the other), and plain HTTP sent to the TLS port 400 "HTTP
// request to an HTTPS port" (it was closed in silence). Well-formed
// requests are served as before.
func TestHTTPEdges(t *testing.T) {
	ca := newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	cp.set(twoHosts(t, ca, g.tlsPort(), u)...) // no plaintext listener: 404 there
	waitFor(t, "a.test over TLS", func() bool {
		resp, err := g.tlsClient(ca.pool, false).Get("https://a.test/x")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	pu, _ := url.Parse(g.url)
	// send writes raw to the plaintext port, or inside TLS to the TLS
	// port, and reads the answer until the gateway closes or 10 s pass
	// (the read timeout is 30 s: an answer within 10 s was not it).
	send := func(overTLS bool, raw string) (string, time.Duration) {
		t.Helper()
		var c net.Conn
		var err error
		if overTLS {
			c, err = tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", g.tls,
				&tls.Config{ServerName: "a.test", RootCAs: ca.pool, NextProtos: []string{"http/1.1"}})
		} else {
			c, err = net.DialTimeout("tcp", pu.Host, 10*time.Second)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		_ = c.SetDeadline(start.Add(10 * time.Second))
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && !strings.Contains(raw, "keep-alive") {
			t.Errorf("%q: no answer within 10s (got %q)", raw, b)
		}
		return string(b), time.Since(start)
	}
	for _, c := range []struct {
		name, raw, status, in string
	}{
		{"bare LF", "GET /x HTTP/1.1\nHost: a.test\n\n", "400", "ends in LF without CR"},
		{"bare LF in a header", "GET /x HTTP/1.1\r\nHost: a.test\nX-A: 1\r\n\r\n", "400", "ends in LF without CR"},
		{"HTTP/9.9", "GET /x HTTP/9.9\r\nHost: a.test\r\n\r\n", "505", `HTTP version \"HTTP/9.9\" not supported`},
		{"HTTP/1.0", "GET /x HTTP/1.0\r\nHost: a.test\r\n\r\n", "", ""},
		{"HTTP/1.1", "GET /x HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", "", ""},
	} {
		for _, overTLS := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s tls=%v", c.name, overTLS), func(t *testing.T) {
				got, took := send(overTLS, c.raw)
				status := c.status
				if status == "" { // served: the upstream over TLS, no route in plaintext
					status = map[bool]string{true: "200", false: "404"}[overTLS]
				}
				if !strings.HasPrefix(got, "HTTP/1.") || !strings.HasPrefix(got[len("HTTP/1.x"):], " "+status+" ") || !strings.Contains(got, c.in) {
					t.Fatalf("answer after %v: %q, want %s with %q", took, got, status, c.in)
				}
				if c.status != "" && !strings.Contains(got, "Connection: close") {
					t.Errorf("a refused request left the connection open: %q", got)
				}
			})
		}
	}

	// Plain HTTP to the TLS port, raw and with curl.
	t.Run("plain HTTP to the TLS port", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", g.tls, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n")
		b, err := io.ReadAll(c)
		if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 400 ") || !strings.Contains(string(b), "HTTP request to an HTTPS port") {
			t.Fatalf("%q %v", b, err)
		}
		curl, err := debian.Ensure("curl", "curl")
		if err != nil {
			t.Skip(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, curl, "-sS", "-w", " status=%{http_code}", "-X", "POST", "--data", "x=1", "http://"+g.tls+"/x").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "status=400") || !strings.Contains(string(out), "HTTP request to an HTTPS port") {
			t.Fatalf("curl: %v: %s", err, out)
		}
	})
	// The TLS port still serves TLS.
	resp, err := g.tlsClient(ca.pool, true).Get("https://a.test/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the edges: %d", resp.StatusCode)
	}
}
