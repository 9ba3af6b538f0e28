package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestHTTP(t *testing.T) {
	p := New()
	defer p.Close()
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			if r.Method != http.MethodHead && r.Header.Get("X-Token") != "t1" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Write([]byte("fine"))
		case "/busy":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/slow":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	defer close(block)
	for _, tc := range []struct {
		name string
		req  HTTP
		want Status
		out  string
	}{
		{"2xx", HTTP{URL: srv.URL + "/ok", Header: map[string][]string{"X-Token": {"t1"}}}, Passing, "200 OK Output: fine"},
		{"header missing", HTTP{URL: srv.URL + "/ok"}, Critical, "401"},
		{"method", HTTP{URL: srv.URL + "/ok", Method: http.MethodHead}, Passing, "HTTP HEAD"},
		{"429", HTTP{URL: srv.URL + "/busy"}, Warning, "429"},
		{"503", HTTP{URL: srv.URL + "/down"}, Critical, "503"},
		{"redirect", HTTP{URL: srv.URL + "/moved"}, Critical, "302"},
		{"refused", HTTP{URL: "http://" + closedAddr(t) + "/"}, Critical, "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := p.HTTP(ctxFor(t, 30*time.Second), tc.req)
			if r.Status != tc.want || !strings.Contains(r.Output, tc.out) {
				t.Fatalf("%v %q, want %v containing %q", r.Status, r.Output, tc.want, tc.out)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		r := p.HTTP(ctxFor(t, 200*time.Millisecond), HTTP{URL: srv.URL + "/slow"})
		if r.Status != Critical || !strings.Contains(r.Output, "deadline") || time.Since(start) > 20*time.Second {
			t.Fatalf("%v %q after %v", r.Status, r.Output, time.Since(start))
		}
	})
}

func TestHTTPTLSSkipVerify(t *testing.T) {
	p := New()
	defer p.Close()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	if r := p.HTTP(ctxFor(t, 30*time.Second), HTTP{URL: srv.URL}); r.Status != Critical || !strings.Contains(r.Output, "certificate") {
		t.Fatalf("a self-signed certificate checked: %v %q", r.Status, r.Output)
	}
	if r := p.HTTP(ctxFor(t, 30*time.Second), HTTP{URL: srv.URL, TLSSkipVerify: true}); r.Status != Passing {
		t.Fatalf("skip-verify: %v %q", r.Status, r.Output)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestTCP(t *testing.T) {
	p := New()
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if r := p.TCP(ctxFor(t, 30*time.Second), ln.Addr().String()); r.Status != Passing || !strings.Contains(r.Output, "Success") {
		t.Fatalf("listening: %v %q", r.Status, r.Output)
	}
	if r := p.TCP(ctxFor(t, 30*time.Second), closedAddr(t)); r.Status != Critical {
		t.Fatalf("closed: %v %q", r.Status, r.Output)
	}
}

func TestGRPC(t *testing.T) {
	p := New()
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("pkg.Up", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("pkg.Down", healthpb.HealthCheckResponse_NOT_SERVING)
	go srv.Serve(ln)
	defer srv.Stop()
	addr := ln.Addr().String()
	for _, tc := range []struct {
		service string
		want    Status
		out     string
	}{
		{"", Passing, "SERVING"}, {"pkg.Up", Passing, "SERVING"}, {"pkg.Down", Critical, "NOT_SERVING"}, {"pkg.Unknown", Critical, "NotFound"},
	} {
		if r := p.GRPC(ctxFor(t, 30*time.Second), addr, tc.service, false); r.Status != tc.want || !strings.Contains(r.Output, tc.out) {
			t.Fatalf("service %q: %v %q, want %v containing %q", tc.service, r.Status, r.Output, tc.want, tc.out)
		}
	}
	// A server without the health service, and no server at all.
	bare := grpc.NewServer()
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go bare.Serve(ln2)
	defer bare.Stop()
	if r := p.GRPC(ctxFor(t, 30*time.Second), ln2.Addr().String(), "", false); r.Status != Critical || !strings.Contains(r.Output, "no grpc.health.v1") {
		t.Fatalf("no health service: %v %q", r.Status, r.Output)
	}
	if r := p.GRPC(ctxFor(t, 2*time.Second), closedAddr(t), "", false); r.Status != Critical {
		t.Fatalf("nothing listening: %v %q", r.Status, r.Output)
	}
	p.Sweep(time.Now().Add(2 * idleConn))
	if n := len(p.conns); n != 0 {
		t.Fatalf("%d connections left after a sweep", n)
	}
}

// BenchmarkHTTP is one HTTP probe of a loopback target (the target's
// share of the CPU included, in this process): over a connection kept
// alive (the prober's way), and over a new connection per probe (Consul's
// way, keep-alive disabled).
func BenchmarkHTTP(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	for _, conn := range []string{"reused", "new"} {
		b.Run("conn="+conn, func(b *testing.B) {
			p := New()
			defer p.Close()
			if conn == "new" {
				p.verify.Transport.(*http.Transport).DisableKeepAlives = true
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if r := p.HTTP(ctx, HTTP{URL: srv.URL + "/health"}); r.Status != Passing {
					b.Fatal(r.Output)
				}
			}
		})
	}
}
