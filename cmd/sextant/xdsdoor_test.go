package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// TestXDSDoor: connections to the xDS port that never start HTTP/2 are
// closed once the handshake timeout passes (the default was gRPC's 120 s,
// long enough for idle connections to use up the file descriptors); those
// over the per-source cap are closed at once and counted; meanwhile the
// HTTP API still answers and a real gRPC client still connects.
func TestXDSDoor(t *testing.T) {
	addr, xaddr, data := freeAddr(t), freeAddr(t), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverFlags{data: data, http: addr, xds: xaddr,
			xdsHandshake: time.Second, xdsPerSource: 20,
			logFormat: "text", logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second, auditLog: "off"})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitTrue(t, 20*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// 25 idle connections from one source: 20 within the cap, 5 over it.
	var conns []net.Conn
	for range 25 {
		c, err := net.DialTimeout("tcp", xaddr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	start := time.Now()
	closed := make(chan time.Duration, len(conns))
	for _, c := range conns {
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			// The server's HTTP/2 settings may come first; then EOF.
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				closed <- -1
				return
			}
			closed <- time.Since(start)
		}()
	}
	// While they are held, the HTTP API accepts and a gRPC client from
	// another source address connects (HTTP/2 handshake and all).
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("the HTTP API while xDS connections are held: %v", err)
	}
	resp.Body.Close()
	from := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	cc, err := grpc.NewClient("passthrough:///"+xaddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return from.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	waitTrue(t, 20*time.Second, func() bool { return cc.GetState() == connectivity.Ready })

	var times []time.Duration
	for range conns {
		d := <-closed
		if d < 0 {
			t.Fatal("an idle xDS connection was still open after 60s")
		}
		times = append(times, d)
	}
	// Five were refused at once, all well before gRPC's 120 s default.
	early := 0
	for _, d := range times {
		if d < 900*time.Millisecond {
			early++
		}
		if d > 30*time.Second {
			t.Fatalf("an idle connection closed after %v with a 1s handshake timeout", d)
		}
	}
	if early < 5 {
		t.Fatalf("%d connections closed before the handshake timeout, want the 5 over the cap: %v", early, times)
	}
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `sextant_xds_connections_refused_total{reason="per_source"} 5`) {
		t.Fatalf("metrics lack the 5 refused connections:\n%s", grepLines(string(body), "sextant_xds_"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
