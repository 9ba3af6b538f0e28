package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestRoundTripperPropagatesTraceContext: a request made with the context
// of a request being served carries its trace headers, on every attempt;
// a request that sets its own keeps them; an invalid traceparent is not
// passed on.
func TestRoundTripperPropagatesTraceContext(t *testing.T) {
	_, c, _ := stackClient(t)
	var mu sync.Mutex
	var seen []http.Header
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Header.Clone())
		if fail {
			fail = false
			w.WriteHeader(503) // retried: the retry must carry the context too
		}
	}))
	defer srv.Close()
	b := &httpBackend{srv: srv}
	mustRegister(t, c, Instance{ID: "t1", Service: "traced", Host: "127.0.0.1", Port: b.port()},
		Instance{ID: "t2", Service: "traced", Host: "127.0.0.1", Port: b.port() /* same server, another instance */})
	v, err := c.NewView(ViewOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	base := NewTransport()
	defer base.CloseIdleConnections()
	hc := &http.Client{Transport: NewRoundTripper(v, RoundTripperOptions{Base: base})}
	do := func(ctx context.Context, own map[string]string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://traced/x", nil)
		for k, v := range own {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in := http.Header{}
	in.Set("Traceparent", tp)
	in.Set("Tracestate", "rojo=1")
	in.Set("X-Request-Id", "req-1")
	in.Set("Authorization", "Bearer secret") // not a trace header: never copied
	do(WithTraceContext(context.Background(), in), nil)
	mu.Lock()
	got := seen
	seen = nil
	mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d attempts, want 2 (one retry)", len(got))
	}
	for i, h := range got {
		if h.Get("Traceparent") != tp || h.Get("Tracestate") != "rojo=1" || h.Get("X-Request-Id") != "req-1" || h.Get("Authorization") != "" {
			t.Errorf("attempt %d headers %v", i, h)
		}
	}

	do(WithTraceContext(context.Background(), in), map[string]string{"Traceparent": "00-11111111111111111111111111111111-2222222222222222-00"})
	in2 := http.Header{}
	in2.Set("Traceparent", "00-XYZ")
	in2.Set("X-Request-Id", "req-2")
	do(WithTraceContext(context.Background(), in2), nil)
	mu.Lock()
	defer mu.Unlock()
	if h := seen[0]; h.Get("Traceparent") != "00-11111111111111111111111111111111-2222222222222222-00" || h.Get("Tracestate") != "" {
		t.Errorf("a request's own context was overwritten: %v", h)
	}
	if h := seen[1]; h.Get("Traceparent") != "" || h.Get("X-Request-Id") != "req-2" {
		t.Errorf("invalid traceparent passed on: %v", h)
	}
}
