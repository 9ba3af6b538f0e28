package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/accesslog"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/trace"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// lineSink is the gateway's AccessLogSink as a list of lines.
type lineSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *lineSink) Line() *[]byte { b := make([]byte, 0, 256); return &b }
func (s *lineSink) Submit(b *[]byte) {
	s.mu.Lock()
	s.lines = append(s.lines, string(*b))
	s.mu.Unlock()
}
func (s *lineSink) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.lines
	s.lines = nil
	return out
}

// telemetryPolicy resolves yaml's Telemetry objects for a proxy of the
// root namespace, as the control plane does for its proxy listener.
func telemetryPolicy(t *testing.T, yaml string) config.TelemetryPolicy {
	t.Helper()
	objs, err := config.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return config.NewTelemetries("", objs).For(config.Workload{Namespace: config.DefaultRootNamespace})
}

const telemetryHead = "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: mesh-default, namespace: istio-system}\nspec:\n"

// Istio's text format as a regular expression: what the gateway writes
// for a call it proxied.
var textLine = regexp.MustCompile(`^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "GET /orders/7\?x=1 HTTP/1\.1" (\d{3}) (\S+) (\S+) - "-" 0 (\d+) \d+ (\S+) "127\.0\.0\.1" "Go-http-client/1\.1" "([0-9a-f]{32})" "shop\.example\.com" "127\.0\.0\.1:\d+" orders - 127\.0\.0\.1:\d+ 127\.0\.0\.1:\d+ - (\S+)\n$`)

// TestTelemetryAccessLog: a Telemetry's access logs, translated by the
// control plane's own code (xds.WithTelemetry), log the calls their
// filter selects, in Istio's text and JSON formats, and follow a change
// of the Telemetry live; without one, --access-log's (All) apply.
func TestTelemetryAccessLog(t *testing.T) {
	var status sync.Map
	up := startUpstream(t, "orders", func(w http.ResponseWriter, r *http.Request) {
		if v, ok := status.Load("code"); ok {
			w.WriteHeader(v.(int))
		}
		io.WriteString(w, "served")
	})
	sink := &lineSink{}
	cp := startControlPlane(t, "")
	set := func(p config.TelemetryPolicy) {
		l := rdsListener("gw", "r")
		if err := xds.WithTelemetry(l, p); err != nil {
			t.Fatal(err)
		}
		cp.set(l, routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/orders", "orders"), prefixRoute("/ok", "orders"))), edsCluster("orders"), assignment("orders", ep{u: up}))
	}
	set(telemetryPolicy(t, telemetryHead+"  accessLogging: [{providers: [{name: envoy}], filter: {expression: 'response.code >= 400'}}]\n"))
	g := startGatewayWith(t, cp.addr, gateway.Options{AccessLog: &gateway.AccessLog{Sink: sink, All: true, Encoding: accesslog.JSON}})
	g.waitServes(t, "/ok", "served")
	sink.take()

	call := func(code int) {
		t.Helper()
		status.Store("code", code)
		if got, body, _ := g.get(t, "/orders/7?x=1", "host", "shop.example.com"); got != code {
			t.Fatalf("call: %d, want %d: %s", got, code, body)
		}
	}
	call(200)
	call(503)
	lines := sink.take()
	if len(lines) != 1 {
		t.Fatalf("%d lines, want the 503's only: %q", len(lines), lines)
	}
	m := textLine.FindStringSubmatch(lines[0])
	if m == nil || m[1] != "503" || m[2] != "-" || m[3] != "via_upstream" {
		t.Fatalf("line %q does not read as Istio's text format of a 503", lines[0])
	}

	// Live: JSON of slow calls too, via the OR filter.
	set(telemetryPolicy(t, telemetryHead+"  accessLogging: [{providers: [{name: envoy-json}], filter: {expression: 'response.code >= 500 || response.duration >= duration(\"0ms\")'}}]\n"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		call(200)
		lines = sink.take()
		if len(lines) == 1 && strings.HasPrefix(lines[0], "{") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the JSON access log never came: %q", lines)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var j map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &j); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"response_code": 200.0, "method": "GET", "path": "/orders/7?x=1", "authority": "shop.example.com",
		"upstream_cluster": "orders", "response_flags": "-", "protocol": "HTTP/1.1", "response_code_details": "via_upstream"} {
		if j[k] != v {
			t.Errorf("%s: %#v, want %#v", k, j[k], v)
		}
	}

	// No Telemetry: the gateway's own (All, JSON), for every call.
	set(config.TelemetryPolicy{})
	for {
		call(200)
		call(201)
		lines = sink.take()
		if len(lines) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--access-log's logs never came back: %q", lines)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A call with no route is logged too, as Envoy's NR.
	if code, _, _ := g.get(t, "/nowhere", "host", "shop.example.com"); code != 404 {
		t.Fatalf("no route: %d", code)
	}
	lines = sink.take()
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &j) != nil || j["response_code"] != 404.0 || j["response_flags"] != "NR" ||
		j["response_code_details"] != "route_not_found" || j["upstream_cluster"] != nil {
		t.Errorf("no route: %q", lines)
	}
}

// TestTelemetryTracing: a Telemetry's sampling and custom tags apply to
// the spans; disableSpanReporting keeps propagating context but exports
// nothing.
func TestTelemetryTracing(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	up := startUpstream(t, "orders", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Traceparent"))
		mu.Unlock()
		io.WriteString(w, "served")
	})
	t.Setenv("SEXTANT_TEST_ZONE", "zone-a")
	rec := &spanRecorder{}
	sampler, _ := trace.NewSampler(0, false) // the flags: nothing sampled
	cp := startControlPlane(t, "")
	set := func(yaml string) {
		l := rdsListener("gw", "r")
		if err := xds.WithTelemetry(l, telemetryPolicy(t, telemetryHead+yaml)); err != nil {
			t.Fatal(err)
		}
		cp.set(l, routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/orders", "orders"), prefixRoute("/ok", "orders"))), edsCluster("orders"), assignment("orders", ep{u: up}))
	}
	set(`  tracing: [{randomSamplingPercentage: 100, customTags: {cluster: {literal: {value: east}}, tenant: {header: {name: x-tenant, defaultValue: none}}, zone: {environment: {name: SEXTANT_TEST_ZONE}}}}]` + "\n")
	g := startGatewayWith(t, cp.addr, gateway.Options{Tracing: &gateway.Tracing{Sampler: sampler, Sink: rec, NodeID: "gw-1"}})
	g.waitServes(t, "/ok", "served")

	tid := trace.NewTraceID()
	if code, _, _ := g.get(t, "/ok/a", "traceparent", "00-"+tid.String()+"-"+trace.NewSpanID().String()+"-00", "x-tenant", "acme"); code != 200 {
		t.Fatal(code)
	}
	// The caller said "not sampled": its decision stands.
	if n := len(rec.of(tid)); n != 0 {
		t.Errorf("%d spans of a trace its caller did not sample", n)
	}
	code, _, _ := g.get(t, "/ok/b", "x-tenant", "acme")
	if code != 200 {
		t.Fatal(code)
	}
	mu.Lock()
	tp := seen[len(seen)-1]
	mu.Unlock()
	sc, err := trace.Extract(headerGetter{"traceparent": tp})
	if err != nil || !sc.Sampled {
		t.Fatalf("upstream traceparent %q: want a sampled trace (Telemetry's 100%%): %v", tp, err)
	}
	spans := rec.of(sc.TraceID)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want a server span and a try", len(spans))
	}
	for _, s := range spans {
		for k, v := range map[string]string{"cluster": "east", "tenant": "acme", "zone": "zone-a"} {
			if got := attr(&s, k); got != v {
				t.Errorf("%v span: tag %s = %q, want %q", s.Kind, k, got, v)
			}
		}
	}

	set(`  tracing: [{randomSamplingPercentage: 100, disableSpanReporting: true}]` + "\n")
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := len(rec.spans)
		g.get(t, "/ok/c")
		mu.Lock()
		tp = seen[len(seen)-1]
		mu.Unlock()
		if len(rec.spans) == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("spans still exported with disableSpanReporting")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if sc, err := trace.Extract(headerGetter{"traceparent": tp}); err != nil || !sc.Sampled {
		t.Errorf("with reporting off the context still goes upstream, sampled: %q %v", tp, err)
	}
}

type headerGetter map[string]string

func (h headerGetter) Peek(k string) []byte {
	if v, ok := h[strings.ToLower(k)]; ok {
		return []byte(v)
	}
	return nil
}

// otelSink is the gateway's AccessLogExporter as a list of lines with
// their calls' start times.
type otelSink struct {
	lineSink
	starts []time.Time
}

func (s *otelSink) Export(b *[]byte, start time.Time) {
	s.Submit(b)
	s.mu.Lock()
	s.starts = append(s.starts, start)
	s.mu.Unlock()
}

// TestTelemetryOTelAccessLog: the otel provider's access log, as the
// control plane publishes it (Envoy's OpenTelemetry access logger), sends
// the text line of the calls its filter selects to the gateway's OTLP
// exporter; the envoy provider beside it still writes every call to the
// file sink.
func TestTelemetryOTelAccessLog(t *testing.T) {
	var status sync.Map
	up := startUpstream(t, "orders", func(w http.ResponseWriter, r *http.Request) {
		if v, ok := status.Load("code"); ok {
			w.WriteHeader(v.(int))
		}
		io.WriteString(w, "served")
	})
	file, otel := &lineSink{}, &otelSink{}
	cp := startControlPlane(t, "")
	l := rdsListener("gw", "r")
	p := telemetryPolicy(t, telemetryHead+"  accessLogging:\n  - providers: [{name: otel}]\n    filter: {expression: 'response.code >= 500'}\n  - providers: [{name: envoy}]\n")
	if err := xds.WithTelemetry(l, p); err != nil {
		t.Fatal(err)
	}
	cp.set(l, routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/orders", "orders"), prefixRoute("/ok", "orders"))), edsCluster("orders"), assignment("orders", ep{u: up}))
	g := startGatewayWith(t, cp.addr, gateway.Options{AccessLog: &gateway.AccessLog{Sink: file, OTel: otel}})
	g.waitServes(t, "/ok", "served")
	file.take()
	otel.take()
	before := time.Now()
	for _, code := range []int{200, 503} {
		status.Store("code", code)
		if got, body, _ := g.get(t, "/orders/7?x=1", "host", "shop.example.com"); got != code {
			t.Fatalf("call: %d, want %d: %s", got, code, body)
		}
	}
	if lines := file.take(); len(lines) != 2 {
		t.Fatalf("file: %d lines, want both calls: %q", len(lines), lines)
	}
	lines := otel.take()
	if len(lines) != 1 {
		t.Fatalf("otel: %d lines, want the 503's only: %q", len(lines), lines)
	}
	if m := textLine.FindStringSubmatch(lines[0]); m == nil || m[1] != "503" {
		t.Fatalf("otel line %q does not read as Istio's text format of a 503", lines[0])
	}
	if s := otel.starts[len(otel.starts)-1]; s.Before(before.Add(-time.Second)) || s.After(time.Now()) {
		t.Fatalf("record's start %v, calls made from %v", s, before)
	}
}
