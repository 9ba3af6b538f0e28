package gateway_test

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/trace"
)

// spanRecorder is the gateway's SpanSink as a list: it stands for the
// OTLP exporter, whose wire the trace package's tests and cmd/sextant's
// Jaeger test check; here what matters is which spans the gateway makes.
type spanRecorder struct {
	mu    sync.Mutex
	spans []trace.Span
}

func (r *spanRecorder) Submit(s trace.Span) {
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
}

func (r *spanRecorder) of(id trace.TraceID) []trace.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []trace.Span
	for _, s := range r.spans {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *trace.Span, k string) string {
	a, ok := s.Attr(k)
	switch {
	case !ok:
		return ""
	case a.IsInt:
		return itoa(a.Int)
	}
	return a.Str
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestTracingSpans: a retried call continues the caller's trace with a
// server span and a client span per try, each try's context goes
// upstream; an unsampled call sends its context unsampled and exports
// nothing, unless it fails and KeepErrors is on; the call record keeps
// the trace id of a call whose span was exported.
func TestTracingSpans(t *testing.T) {
	var fail atomic.Int64 // answers to fail with 503
	var mu sync.Mutex
	var seen []http.Header
	up := startUpstream(t, "orders", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		if fail.Add(-1) >= 0 {
			w.WriteHeader(503)
			return
		}
		w.Write([]byte("ok"))
	})
	last := func() http.Header { mu.Lock(); defer mu.Unlock(); return seen[len(seen)-1] }
	rec := &spanRecorder{}
	sampler, err := trace.NewSampler(0, true) // the callers decide; errors kept
	if err != nil {
		t.Fatal(err)
	}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"},
		timeoutRoute("/", "orders", 5*time.Second, &route.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(1)}))),
		edsCluster("orders"), assignment("orders", ep{u: up}))
	g := startGatewayWith(t, cp.addr, gateway.Options{Tracing: &gateway.Tracing{Sampler: sampler, Sink: rec, NodeID: "gw-1"}})
	g.waitServes(t, "/", "ok")

	tid, caller := trace.NewTraceID(), trace.NewSpanID()
	fail.Store(1)
	if code, _, _ := g.get(t, "/buy", "traceparent", "00-"+tid.String()+"-"+caller.String()+"-01", "host", "shop.example.com"); code != 200 {
		t.Fatalf("traced call: %d", code)
	}
	spans := rec.of(tid)
	if len(spans) != 3 {
		t.Fatalf("%d spans, want a server span and two tries: %+v", len(spans), spans)
	}
	srv := spans[2] // ended last
	if srv.Kind != trace.KindServer || srv.Parent != caller || srv.Name != "shop.example.com/*" || srv.Error {
		t.Fatalf("server span %+v", srv)
	}
	for k, v := range map[string]string{"component": "proxy", "node_id": "gw-1", "upstream_cluster": "orders", "http.method": "GET",
		"http.url": "http://shop.example.com/buy", "http.status_code": "200", "retries": "1", "upstream_address": up.addr} {
		if got := attr(&srv, k); got != v {
			t.Errorf("server span %s = %q, want %q", k, got, v)
		}
	}
	for i, try := range spans[:2] {
		if try.Kind != trace.KindClient || try.Parent != srv.SpanID || attr(&try, "retry.attempt") != itoa(int64(i)) {
			t.Errorf("try %d: %+v", i, try)
		}
		if try.Start < srv.Start || try.End > srv.End {
			t.Errorf("try %d [%d, %d] outside the call [%d, %d]", i, try.Start, try.End, srv.Start, srv.End)
		}
	}
	if attr(&spans[0], "http.status_code") != "503" || !spans[0].Error || attr(&spans[1], "http.status_code") != "200" || spans[1].Error {
		t.Errorf("tries: %+v", spans[:2])
	}
	if got := last().Get("Traceparent"); got != "00-"+tid.String()+"-"+spans[1].SpanID.String()+"-01" {
		t.Errorf("last try went upstream with traceparent %q, want the try's span %s", got, spans[1].SpanID)
	}
	waitFor(t, "the call record's trace id", func() bool {
		for _, c := range g.calls(t, "orders") {
			if c.TraceID == tid.String() {
				return true
			}
		}
		return false
	})

	// Unsampled (rate 0, no caller decision): the context goes upstream
	// flagged unsampled, nothing is exported.
	n := len(rec.of(tid))
	if code, _, _ := g.get(t, "/plain"); code != 200 {
		t.Fatalf("plain call: %d", code)
	}
	tp := last().Get("Traceparent")
	sc, err := trace.ParseTraceparent([]byte(tp))
	if err != nil || sc.Sampled {
		t.Fatalf("unsampled call went upstream with traceparent %q (%v)", tp, err)
	}
	if got := rec.of(sc.TraceID); len(got) != 0 || len(rec.of(tid)) != n {
		t.Fatalf("unsampled call exported %+v", got)
	}

	// Unsampled but failing (both tries 503): KeepErrors exports its spans.
	fail.Store(2)
	if code, _, _ := g.get(t, "/fails", "X-B3-Sampled", "0"); code != 503 {
		t.Fatalf("failing call: %d", code)
	}
	h := last()
	if h.Get("X-B3-Sampled") != "0" || h.Get("X-B3-Traceid") == "" || h.Get("Traceparent") != "" {
		t.Fatalf("a B3 caller's call went upstream with %v, want B3 only", h)
	}
	bad, err := trace.ParseTraceID(h.Get("X-B3-Traceid"))
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.of(bad); len(got) != 3 || !got[2].Error || attr(&got[2], "http.status_code") != "503" {
		t.Fatalf("failed unsampled call: spans %+v, want 3 kept, the server span an error", got)
	}
}
