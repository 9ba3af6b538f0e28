package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// jaegerBinary is the Jaeger v2 binary "make test" built before the tests
// ($SEXTANT_JAEGER: the build takes minutes, outside the tests' timeout);
// without it, it builds Jaeger (github.com/jaegertracing/jaeger/cmd/jaeger,
// pinned in tools/jaeger, its own module so that Jaeger's dependencies stay
// out of this module's builds) into the user's cache, once per pin.
func jaegerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SEXTANT_JAEGER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("SEXTANT_JAEGER: %v", err)
		}
		return p
	}
	src, err := filepath.Abs(filepath.Join("..", "..", "tools", "jaeger"))
	if err != nil {
		t.Fatal(err)
	}
	var files [2][]byte
	for i, name := range []string{"go.mod", "go.sum"} {
		if files[i], err = os.ReadFile(filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256(append(append(files[0], 0), files[1]...))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sextant-test", "jaeger-"+hex.EncodeToString(sum[:8]))
	bin := filepath.Join(dir, "jaeger")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Build beside, then rename: a concurrent run sees all or nothing.
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	t.Logf("building Jaeger into %s (minutes, once)", dir)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, "github.com/jaegertracing/jaeger/cmd/jaeger")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build jaeger in %s: %v\n%s", src, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// jaeger is a running Jaeger v2 with in-memory storage. It takes OTLP
// logs too (Jaeger v2 is an OpenTelemetry collector): its debug exporter
// prints each record to out.
type jaeger struct {
	otlpGRPC, otlpHTTP, query string
	out                       *syncBuffer
}

const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
    logs:
      receivers: [otlp]
      exporters: [debug]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: %s
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
  debug:
    verbosity: detailed
    use_internal_logger: false
`

// startJaeger runs Jaeger on loopback until the test ends: OTLP gRPC and
// HTTP receivers, and the query API.
func startJaeger(t *testing.T) *jaeger {
	t.Helper()
	bin := jaegerBinary(t)
	j := &jaeger{otlpGRPC: freeAddr(t), otlpHTTP: freeAddr(t), query: freeAddr(t)}
	health := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, j.query, freeAddr(t), health, j.otlpGRPC, j.otlpHTTP), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg)
	logs := new(syncBuffer)
	j.out = logs
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("jaeger's output:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + j.query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return j
			}
		}
		select {
		case <-exited:
			t.Fatalf("jaeger exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger's query API not up in 60s: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// jaegerSpan is a span as Jaeger's query API (/api/traces/ID) answers it.
type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

func (s *jaegerSpan) tag(k string) string {
	for _, t := range s.Tags {
		if t.Key == k {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

func (s *jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// trace returns the spans of trace id once Jaeger holds at least n.
func (j *jaeger) trace(t *testing.T, id string, n int) ([]jaegerSpan, map[string]string) {
	t.Helper()
	var out struct {
		Data []struct {
			Spans     []jaegerSpan `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + j.query + "/api/traces/" + id)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = resp.Status + " " + string(b)
			out.Data = nil
			if resp.StatusCode == 200 && json.Unmarshal(b, &out) == nil && len(out.Data) == 1 && len(out.Data[0].Spans) >= n {
				services := map[string]string{}
				for id, p := range out.Data[0].Processes {
					services[id] = p.ServiceName
				}
				return out.Data[0].Spans, services
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: fewer than %d spans in Jaeger after 30s; last answer %.2000s", id, n, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// traceUpstream answers 503 to its first call when failFirst, then
// 200, and keeps the trace headers of each call.
type traceUpstream struct {
	addr      *net.TCPAddr
	failFirst atomic.Bool
	mu        sync.Mutex
	seen      []http.Header
}

func startTraceUpstream(t *testing.T) *traceUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &traceUpstream{addr: ln.Addr().(*net.TCPAddr)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		if u.failFirst.CompareAndSwap(true, false) {
			http.Error(w, "first try fails", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return u
}

func (u *traceUpstream) headers() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen...)
}

// tracingRouting routes shop.example.com to orders, retrying a 5xx once.
const tracingRouting = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: http, protocol: HTTP}
    hosts: [shop.example.com]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [shop-gw]
  http:
  - name: buy
    route: [{destination: {host: orders}}]
    retries: {attempts: 2, retryOn: 5xx}
`

// startTracedMesh runs the server and a gateway sending spans to endpoint
// over protocol at sampling percent, routes shop.example.com to up, and
// returns the proxy's and admin API's addresses.
func startTracedMesh(t *testing.T, endpoint, protocol string, sampling float64, up *traceUpstream) (proxy, admin string) {
	t.Helper()
	api, proxy, admin, server := startMeshWith(t, "", 10*time.Second, func(f *gatewayFlags, _ string) {
		f.tracingEndpoint, f.tracingProtocol, f.tracingSampling = endpoint, protocol, sampling
		f.tracingService = "shop-gateway"
	})
	if _, err := api.Register(context.Background(), client.Instance{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: up.addr.Port}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(proxy)
	var p int
	fmt.Sscan(port, &p)
	if out, err := runOn(t, server, fmt.Sprintf(tracingRouting, p), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool {
		code, _ := shopCall(proxy, nil)
		return code == 200
	})
	return proxy, admin
}

// shopCall calls the gateway for shop.example.com with headers h.
func shopCall(proxy string, h map[string]string) (int, error) {
	req, _ := http.NewRequest("GET", "http://"+proxy+"/buy?item=7", nil)
	req.Host = "shop.example.com"
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestTracingJaeger: a call through the real gateway, retried once, reaches
// a real Jaeger (v2, built from its module) over OTLP gRPC and over
// OTLP/HTTP as one trace: the gateway's server span, child of the caller's
// span, with a client span per try under it; the upstream receives the
// context of its try, in the caller's format (W3C, or B3); the call
// record keeps the trace id.
func TestTracingJaeger(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Jaeger")
	}
	j := startJaeger(t)
	for _, tc := range []struct{ protocol, endpoint string }{{"grpc", j.otlpGRPC}, {"http", j.otlpHTTP}} {
		t.Run(tc.protocol, func(t *testing.T) {
			up := startTraceUpstream(t)
			proxy, admin := startTracedMesh(t, tc.endpoint, tc.protocol, 0, up) // 0%: only the callers' decisions
			const caller = "00f067aa0ba902b7"
			tid := newHexID(16)
			up.failFirst.Store(true)
			before := len(up.headers())
			if code, err := shopCall(proxy, map[string]string{"traceparent": "00-" + tid + "-" + caller + "-01"}); err != nil || code != 200 {
				t.Fatalf("traced call: %d %v", code, err)
			}
			spans, services := j.trace(t, tid, 3)
			if len(spans) != 3 {
				t.Fatalf("%d spans, want the server span and two tries: %+v", len(spans), spans)
			}
			var server *jaegerSpan
			var tries []*jaegerSpan
			for i := range spans {
				s := &spans[i]
				if services[s.ProcessID] != "shop-gateway" {
					t.Errorf("span %s of service %q, want shop-gateway", s.SpanID, services[s.ProcessID])
				}
				if s.tag("span.kind") == "server" {
					server = s
				} else {
					tries = append(tries, s)
				}
			}
			if server == nil || len(tries) != 2 {
				t.Fatalf("want one server span and two client spans: %+v", spans)
			}
			if server.parent() != caller || server.OperationName != "shop.example.com/*" {
				t.Errorf("server span: parent %q (want the caller's %s), operation %q", server.parent(), caller, server.OperationName)
			}
			for k, v := range map[string]string{"http.method": "GET", "http.url": "http://shop.example.com/buy?item=7",
				"http.status_code": "200", "component": "proxy", "node_id": "mesh-test-gateway", "retries": "1"} {
				if got := server.tag(k); got != v {
					t.Errorf("server span tag %s = %q, want %q", k, got, v)
				}
			}
			if !strings.Contains(server.tag("upstream_cluster"), "orders") {
				t.Errorf("server span upstream_cluster %q", server.tag("upstream_cluster"))
			}
			byAttempt := map[string]*jaegerSpan{}
			for _, s := range tries {
				if s.parent() != server.SpanID || s.tag("span.kind") != "client" {
					t.Errorf("try span %s: parent %q kind %q, want child of %s, client", s.SpanID, s.parent(), s.tag("span.kind"), server.SpanID)
				}
				if s.tag("upstream_address") != up.addr.String() {
					t.Errorf("try span upstream_address %q, want %s", s.tag("upstream_address"), up.addr)
				}
				byAttempt[s.tag("retry.attempt")] = s
			}
			first, second := byAttempt["0"], byAttempt["1"]
			if first == nil || second == nil || first.tag("http.status_code") != "503" || first.tag("error") != "true" || second.tag("http.status_code") != "200" {
				t.Fatalf("tries: want attempt 0 answered 503 (error) and attempt 1 answered 200: %+v %+v", first, second)
			}
			// Each try went upstream with its own span as the parent.
			seen := up.headers()[before:]
			if len(seen) != 2 {
				t.Fatalf("upstream saw %d calls, want 2", len(seen))
			}
			for i, want := range []*jaegerSpan{first, second} {
				if got := seen[i].Get("Traceparent"); got != "00-"+tid+"-"+want.SpanID+"-01" {
					t.Errorf("try %d went upstream with traceparent %q, want its span %s", i, got, want.SpanID)
				}
			}
			// The call record links the call to its trace.
			waitTrue(t, 15*time.Second, func() bool { return callTraceIDs(t, admin)[tid] })

			// B3 in, B3 out: a caller's X-B3-* context goes upstream as X-B3-*.
			b3 := newHexID(16)
			before = len(up.headers())
			if code, err := shopCall(proxy, map[string]string{"X-B3-TraceId": b3, "X-B3-SpanId": caller, "X-B3-Sampled": "1"}); err != nil || code != 200 {
				t.Fatalf("B3 call: %d %v", code, err)
			}
			spans, _ = j.trace(t, b3, 2)
			got := up.headers()[before]
			if got.Get("Traceparent") != "" || got.Get("X-B3-Traceid") != b3 || got.Get("X-B3-Sampled") != "1" || got.Get("X-B3-Spanid") == caller {
				t.Errorf("B3 call went upstream with %v", got)
			}
			var try, srv string
			for _, s := range spans {
				if s.tag("span.kind") == "client" {
					try = s.SpanID
				} else {
					srv = s.SpanID
				}
			}
			if got.Get("X-B3-Spanid") != try || got.Get("X-B3-Parentspanid") != srv {
				t.Errorf("B3 upstream span %s parent %s, want the try's %s under the server span %s", got.Get("X-B3-Spanid"), got.Get("X-B3-Parentspanid"), try, srv)
			}
			// An unsampled caller: the context still goes upstream, unsampled.
			before = len(up.headers())
			un := newHexID(16)
			shopCall(proxy, map[string]string{"traceparent": "00-" + un + "-" + caller + "-00"})
			if tp := up.headers()[before].Get("Traceparent"); !strings.HasPrefix(tp, "00-"+un+"-") || !strings.HasSuffix(tp, "-00") {
				t.Errorf("unsampled call went upstream with traceparent %q", tp)
			}
		})
	}
}

// callTraceIDs returns the trace ids of the gateway's call records.
func callTraceIDs(t *testing.T, admin string) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/v1/calls?service=default/orders&from=0")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var out struct {
		Calls []struct {
			TraceID string `json:"trace_id"`
		} `json:"calls"`
	}
	json.NewDecoder(resp.Body).Decode(&out)
	ids := map[string]bool{}
	for _, c := range out.Calls {
		ids[c.TraceID] = true
	}
	return ids
}

func newHexID(n int) string {
	b := make([]byte, n)
	for {
		if _, err := rand.Read(b); err == nil && b[0] != 0 {
			return hex.EncodeToString(b)
		}
	}
}

// metricValue reads one sample of the gateway's /metrics; -1: absent.
func metricValue(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

// TestTracingCollectorDownOrSlow: with every call sampled and the
// collector down (nothing listens) or stuck (it takes requests and never
// answers), calls go through unslowed and the spans that cannot be sent
// are dropped and counted on /metrics. A gateway that waited for the
// collector would stall a call for the export timeout (10 s).
func TestTracingCollectorDownOrSlow(t *testing.T) {
	stuck, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	stuckSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	})}
	go stuckSrv.Serve(stuck)
	defer stuckSrv.Close()
	defer close(hold)
	for _, tc := range []struct {
		name, protocol, endpoint, counter string
		calls                             int
	}{
		{"down", "grpc", freeAddr(t), "sextant_gateway_tracing_spans_dropped_export_failed_total", 200},
		// 2 spans a call: past the queue (2048) and the batch held (512).
		{"stuck", "http", stuck.Addr().String(), "sextant_gateway_tracing_spans_dropped_queue_full_total", 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startTraceUpstream(t)
			proxy, admin := startTracedMesh(t, tc.endpoint, tc.protocol, 100, up)
			var slowest time.Duration
			start := time.Now()
			for i := range tc.calls {
				t0 := time.Now()
				if code, err := shopCall(proxy, nil); err != nil || code != 200 {
					t.Fatalf("call %d: %d %v", i, code, err)
				}
				slowest = max(slowest, time.Since(t0))
			}
			t.Logf("%d calls in %v, slowest %v", tc.calls, time.Since(start), slowest)
			if slowest > 5*time.Second {
				t.Errorf("slowest call %v: a call waited for the collector", slowest)
			}
			waitTrue(t, 30*time.Second, func() bool { return metricValue(t, admin, tc.counter) > 0 })
			if v := metricValue(t, admin, "sextant_gateway_tracing_spans_exported_total"); v != 0 {
				t.Errorf("spans exported %v with no collector answering", v)
			}
		})
	}
}

// Bad tracing flags are refused before the gateway starts, naming the flag.
func TestGatewayTracingFlagsRefused(t *testing.T) {
	base := gatewayFlags{listen: "127.0.0.1:0", logFormat: "text", logLevel: "error", noRecords: true, tracingFlags: tracingFlags{tracingEndpoint: "127.0.0.1:4317", tracingProtocol: "grpc"}}
	for _, c := range []struct {
		change func(f *gatewayFlags)
		want   string
	}{
		{func(f *gatewayFlags) { f.tracingSampling = 150 }, "--tracing-sampling 150: want a percentage, 0 to 100"},
		{func(f *gatewayFlags) { f.tracingSampling = -1 }, "--tracing-sampling -1"},
		{func(f *gatewayFlags) { f.tracingProtocol = "thrift" }, `--tracing-otlp-protocol "thrift": otlp: protocol "thrift": want grpc or http/protobuf`},
		{func(f *gatewayFlags) { f.tracingEndpoint = "http://127.0.0.1:4317" }, "want host:port"},
		{func(f *gatewayFlags) { f.tracingUI = "http://jaeger:16686/search" }, "it must name {trace_id}"},
		{func(f *gatewayFlags) { f.tracingUI = "jaeger:16686/trace/{trace_id}" }, "want an http or https URL"},
		{func(f *gatewayFlags) { f.accessLogOTLP, f.accessLogOTLPProt = "127.0.0.1:4317", "thrift" },
			`--access-log-otlp-protocol "thrift": otlp: protocol "thrift": want grpc or http/protobuf`},
		{func(f *gatewayFlags) { f.accessLogOTLP, f.accessLogOTLPProt = "http://127.0.0.1:4317", "grpc" }, "want host:port"},
	} {
		f := base
		c.change(&f)
		err := runGateway(t.Context(), f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", f, err, c.want)
		}
	}
}
