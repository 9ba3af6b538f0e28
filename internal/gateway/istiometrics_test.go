package gateway

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// gatherIstio scrapes m and returns the families by name.
func gatherIstio(t testing.TB, m *istioMetrics) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

type recorded struct{ n int }

func (r *recorded) Record(calllog.Record) { r.n++ }

func TestIstioLabelMapping(t *testing.T) {
	next := &recorded{}
	m := newIstioMetrics(next, nil, 0)
	// An mTLS caller, a subset by version, an upstream 503 after a
	// connect failure and a retry.
	m.Record(calllog.Record{Service: "shop/orders", Subset: "version=v2,zone=z1", Status: 503, Retries: 1,
		Reason: calllog.ReasonConnect, Latency: 7 * time.Millisecond, BytesIn: 12, BytesOut: 345,
		Principal: "spiffe://cluster.local/ns/web/sa/frontend", Conn: calllog.ConnTLS | calllog.ConnPeerCert})
	// A plaintext gRPC call to a service with no namespace.
	m.Record(calllog.Record{Service: "echo", Status: 200, GRPCStatus: 5 + 1, Latency: 300 * time.Microsecond})
	if next.n != 2 {
		t.Fatalf("the next recorder got %d records, want 2", next.n)
	}
	fams := gatherIstio(t, m)
	reqs := fams["istio_requests_total"]
	if reqs == nil || len(reqs.Metric) != 4 { // 2 label sets x 2 reporters
		t.Fatalf("istio_requests_total: %v", reqs)
	}
	want := map[string]map[string]string{
		"shop/orders": {
			"source_workload": "frontend", "source_workload_namespace": "web", "source_principal": "spiffe://cluster.local/ns/web/sa/frontend",
			"source_canonical_service": "frontend", "source_cluster": "Kubernetes",
			"destination_service": "orders.shop.svc.cluster.local", "destination_service_name": "orders",
			"destination_service_namespace": "shop", "destination_workload": "orders", "destination_workload_namespace": "shop",
			"destination_version": "v2", "destination_canonical_revision": "v2", "destination_canonical_service": "orders",
			"request_protocol": "http", "response_code": "503", "grpc_response_status": "", "response_flags": "UF,URX",
			"connection_security_policy": "mutual_tls",
		},
		"echo": {
			"source_workload": "unknown", "source_workload_namespace": "unknown", "source_principal": "unknown",
			"destination_service": "echo", "destination_service_name": "echo", "destination_service_namespace": "unknown",
			"destination_version": "unknown", "destination_canonical_revision": "latest",
			"request_protocol": "grpc", "response_code": "200", "grpc_response_status": "5", "response_flags": "-",
			"connection_security_policy": "none",
		},
	}
	reporters := map[string]int{}
	for _, s := range reqs.Metric {
		got := labelsOf(s)
		if len(got) != len(istioLabels) {
			t.Errorf("%d labels, want Istio's %d: %v", len(got), len(istioLabels), got)
		}
		reporters[got["reporter"]]++
		if got["reporter"] == "source" {
			// Istio's source reporter does not know the server side's policy.
			if got["connection_security_policy"] != "unknown" {
				t.Errorf("source reporter: connection_security_policy %q, want unknown", got["connection_security_policy"])
			}
			got["connection_security_policy"] = want[map[bool]string{true: "shop/orders", false: "echo"}[got["destination_service_name"] == "orders"]]["connection_security_policy"]
		}
		key := "echo"
		if got["destination_service_name"] == "orders" {
			key = "shop/orders"
		}
		for k, v := range want[key] {
			if got[k] != v {
				t.Errorf("%s: %s=%q, want %q", key, k, got[k], v)
			}
		}
		if s.GetCounter().GetValue() != 1 {
			t.Errorf("%s: %v requests, want 1", key, s.GetCounter().GetValue())
		}
	}
	if reporters["source"] != 2 || reporters["destination"] != 2 {
		t.Errorf("reporters %v, want 2 source and 2 destination", reporters)
	}
	// 7 ms falls in the le=10 bucket, not le=5; 345 bytes in le=1000.
	for _, s := range fams["istio_request_duration_milliseconds"].Metric {
		if labelsOf(s)["destination_service_name"] != "orders" {
			continue
		}
		h := s.GetHistogram()
		var les []float64
		for _, b := range h.Bucket {
			les = append(les, b.GetUpperBound())
		}
		// Istio's request duration buckets, in milliseconds.
		if want := []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}; !slices.Equal(les, want) {
			t.Errorf("duration buckets %v, want Istio's %v", les, want)
		}
		if h.GetSampleCount() != 1 || h.GetSampleSum() != 7 {
			t.Errorf("duration count %d sum %v, want 1 and 7", h.GetSampleCount(), h.GetSampleSum())
		}
		for _, b := range h.Bucket {
			wantN := uint64(0)
			if b.GetUpperBound() >= 10 {
				wantN = 1
			}
			if b.GetCumulativeCount() != wantN {
				t.Errorf("duration le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), wantN)
			}
		}
	}
	for _, s := range fams["istio_response_bytes"].Metric {
		if labelsOf(s)["destination_service_name"] != "orders" {
			continue
		}
		var les []float64
		for _, b := range s.GetHistogram().Bucket {
			les = append(les, b.GetUpperBound())
		}
		if want := []float64{1, 10, 100, 1000, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}; !slices.Equal(les, want) {
			t.Errorf("size buckets %v, want Istio's %v", les, want)
		}
		for _, b := range s.GetHistogram().Bucket {
			wantN := uint64(0)
			if b.GetUpperBound() >= 1000 {
				wantN = 1
			}
			if got := b.GetCumulativeCount(); got != wantN {
				t.Errorf("response bytes le=%v: %d", b.GetUpperBound(), got)
			}
		}
	}
}

func TestIstioResponseFlags(t *testing.T) {
	for _, c := range []struct {
		reason  calllog.Reason
		status  uint16
		retries uint8
		want    string
	}{
		{calllog.ReasonNone, 200, 0, "-"},
		{calllog.ReasonNone, 503, 2, "-"}, // the upstream's own 503
		{calllog.ReasonNone, 0, 0, "DC"},
		{calllog.ReasonNoRoute, 404, 0, "NR"},
		{calllog.ReasonNoCluster, 503, 0, "NC"},
		{calllog.ReasonNoHealthy, 503, 0, "UH"},
		{calllog.ReasonNoSubset, 503, 0, "UH"},
		{calllog.ReasonShed, 503, 0, "UO"},
		{calllog.ReasonOverflow, 503, 0, "UO"},
		{calllog.ReasonTimeout, 504, 0, "UT"},
		{calllog.ReasonTimeout, 504, 1, "UT,URX"},
		{calllog.ReasonConnect, 503, 0, "UF"},
		{calllog.ReasonTLS, 503, 0, "UF"},
		{calllog.ReasonReset, 503, 0, "UC"},
		{calllog.ReasonReset, 503, 3, "UC,URX"},
		{calllog.ReasonBadRequestBody, 400, 0, "DPE"},
		{calllog.ReasonRBACDenied, 403, 0, "RBAC"},
		{calllog.ReasonTooLarge, 502, 0, "-"},
	} {
		if got := istioFlagNames[istioFlagsOf(c.reason, c.status, c.retries)]; got != c.want {
			t.Errorf("reason %v status %d retries %d: %q, want %q", c.reason, c.status, c.retries, got, c.want)
		}
	}
}

func TestIstioSourceIdentity(t *testing.T) {
	for id, want := range map[string][2]string{
		"spiffe://cluster.local/ns/web/sa/frontend": {"web", "frontend"},
		"spiffe://td/ns/web/sa/":                    {"", ""},
		"spiffe://td/ns/web":                        {"", ""},
		"https://td/ns/web/sa/x":                    {"", ""},
		"spiffe://td/ns/a/sa/b/extra":               {"", ""},
	} {
		ns, sa, _ := spiffeNamespaceAccount(id)
		if ns != want[0] || sa != want[1] {
			t.Errorf("%q: %q %q, want %q", id, ns, sa, want)
		}
	}
	for subset, want := range map[string]string{"": "unknown", "v1": "v1", "version=v3": "v3", "a=b,version=v4": "v4", "zone=z1": "unknown"} {
		if got := subsetVersion(subset); got != want {
			t.Errorf("subset %q: version %q, want %q", subset, got, want)
		}
	}
}

// The cap: past max label sets, new ones count in "other", the overflow
// counter says how many calls, and the kept sets keep counting.
func TestIstioCardinalityCap(t *testing.T) {
	m := newIstioMetrics(nil, []string{"source", "source"}, 3) // named twice: once
	for i := range 10 {
		m.Record(calllog.Record{Service: fmt.Sprintf("ns/s%d", i), Status: 200})
	}
	m.Record(calllog.Record{Service: "ns/s0", Status: 200}) // kept: counts in its own set
	fams := gatherIstio(t, m)
	reqs := fams["istio_requests_total"].Metric
	if len(reqs) != 4 {
		t.Fatalf("%d series, want 3 kept and other", len(reqs))
	}
	byName := map[string]float64{}
	for _, s := range reqs {
		l := labelsOf(s)
		if l["destination_service_name"] == "other" && l["response_code"] != "other" {
			t.Errorf("other series labels %v: every label but reporter should be other", l)
		}
		byName[l["destination_service_name"]] = s.GetCounter().GetValue()
	}
	if byName["other"] != 7 || byName["s0"] != 2 || byName["s1"] != 1 || byName["s2"] != 1 {
		t.Errorf("requests by service %v, want s0 2, s1 1, s2 1, other 7", byName)
	}
	if got := fams["sextant_gateway_istio_metrics_overflow_total"].Metric[0].GetCounter().GetValue(); got != 7 {
		t.Errorf("overflow counter %v, want 7", got)
	}
	if got := fams["sextant_gateway_istio_metrics_label_sets"].Metric[0].GetGauge().GetValue(); got != 3 {
		t.Errorf("label sets %v, want 3", got)
	}
}

// Calls alternating between label sets, kept ones and overflowing ones,
// each count in their own series: the series cached from the last call
// (istioMetrics.last) is used only for its own key.
func TestIstioLastSeries(t *testing.T) {
	m := newIstioMetrics(nil, []string{"source"}, 2)
	rec := func(svc string, code uint16) calllog.Record {
		return calllog.Record{Service: "ns/" + svc, Status: code}
	}
	for _, r := range []calllog.Record{rec("a", 200), rec("b", 200), rec("c", 200), rec("a", 200), rec("a", 200),
		rec("c", 200), rec("b", 200), rec("a", 503), rec("a", 200), rec("c", 200), rec("c", 200), rec("b", 200)} {
		m.Record(r)
	}
	got := map[string]float64{}
	for _, s := range gatherIstio(t, m)["istio_requests_total"].Metric {
		l := labelsOf(s)
		got[l["destination_service_name"]+" "+l["response_code"]] = s.GetCounter().GetValue()
	}
	// a 200 and b 200 are kept; c and a's 503 come past the cap.
	want := map[string]float64{"a 200": 4, "b 200": 3, "other other": 5}
	if !maps.Equal(got, want) {
		t.Errorf("requests by series %v, want %v", got, want)
	}
}

// BenchmarkIstioMetricsRecord is the per-call cost of an existing label
// set: no allocation.
func BenchmarkIstioMetricsRecord(b *testing.B) {
	m := newIstioMetrics(nil, nil, 0)
	r := calllog.Record{Service: "shop/orders", Subset: "v1", Status: 200, Latency: 3 * time.Millisecond, BytesIn: 100, BytesOut: 2000,
		Principal: "spiffe://cluster.local/ns/web/sa/frontend", Conn: calllog.ConnTLS | calllog.ConnPeerCert}
	m.Record(r)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Record(r)
		}
	})
}

func TestIstioMetricsRecordAllocs(t *testing.T) {
	m := newIstioMetrics(nil, nil, 0)
	r := calllog.Record{Service: "shop/orders", Status: 200, Latency: time.Millisecond, Principal: "spiffe://td/ns/a/sa/b"}
	m.Record(r)
	if n := testing.AllocsPerRun(1000, func() { m.Record(r) }); n != 0 {
		t.Errorf("%v allocations per call, want 0", n)
	}
}

// TestIstioMetricsMemory measures the heap the metrics keep for 1,000
// services x 10 callers (10,000 label sets, 20,000 series per metric with
// both reporters) and bounds it; -v prints the figure.
func TestIstioMetricsMemory(t *testing.T) {
	const services, callers = 1000, 10
	recs := make([]calllog.Record, 0, services*callers)
	for s := range services {
		for c := range callers {
			recs = append(recs, calllog.Record{Service: fmt.Sprintf("ns%d/svc%d", s%50, s), Status: 200, Latency: time.Millisecond,
				Principal: fmt.Sprintf("spiffe://cluster.local/ns/ns%d/sa/caller%d", c, c), Conn: calllog.ConnPeerCert})
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := newIstioMetrics(nil, nil, services*callers)
	for i := range recs {
		m.Record(recs[i])
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m)
	if n := len(m.series); n != services*callers {
		t.Fatalf("%d label sets, want %d", n, services*callers)
	}
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	per := heap / (services * callers)
	t.Logf("istio metrics: %d services x %d callers: %d label sets, heap %.1f MiB (%d B per label set, 4 metrics x %d reporters each)",
		services, callers, len(m.series), float64(heap)/(1<<20), per, len(m.reporters))
	if per > 4096 {
		t.Errorf("%d B per label set, want under 4 KiB", per)
	}
	// A scrape of it all works and names every set once per reporter.
	fams := gatherIstio(t, m)
	if n := len(fams["istio_requests_total"].Metric); n != 2*services*callers {
		t.Errorf("%d istio_requests_total series, want %d", n, 2*services*callers)
	}
}

// FuzzIstioLabelValues: whatever a caller's certificate or a subset
// says, the label values are complete and the source's namespace and
// workload are path segments of the SPIFFE id, never more.
func FuzzIstioLabelValues(f *testing.F) {
	f.Add("shop/orders", "version=v1,zone=z", "spiffe://cluster.local/ns/web/sa/frontend", uint16(200), uint8(0))
	f.Add("orders", "v2", "spiffe://td/ns//sa/x", uint16(503), uint8(15))
	f.Add("/", "", "spiffe://", uint16(0), uint8(1))
	f.Add("a/b/c", "version=,version=v9", "spiffe://td/ns/a/sa/b/c", uint16(999), uint8(255))
	f.Fuzz(func(t *testing.T, service, subset, principal string, code uint16, grpc uint8) {
		vals := istioLabelValues(istioKey{service: service, subset: subset, principal: principal, code: code, grpc: grpc})
		if len(vals) != len(istioLabels)-1 {
			t.Fatalf("%d values, want %d", len(vals), len(istioLabels)-1)
		}
		if ns, sa, ok := spiffeNamespaceAccount(principal); ok {
			if ns == "" || sa == "" || strings.Contains(ns, "/") || strings.Contains(sa, "/") {
				t.Fatalf("%q: namespace %q account %q", principal, ns, sa)
			}
			if vals[0] != sa || vals[1] != ns {
				t.Fatalf("%q: source_workload %q namespace %q", principal, vals[0], vals[1])
			}
		}
	})
}

// TCP label sets: Istio's TCP labels (no response_code or
// grpc_response_status), request_protocol tcp, and the same cap.
func TestIstioTCPSeries(t *testing.T) {
	m := newIstioMetrics(nil, []string{"destination"}, 2)
	a := m.tcpSeries(istioKey{service: "shop/db", subset: "v3"})
	a.opened.Add(1)
	a.sentBytes.Add(100)
	m.Record(calllog.Record{Service: "shop/orders", Status: 200})
	over := m.tcpSeries(istioKey{service: "shop/other"}) // the third label set
	if over != m.tcpOver || m.dropped.Load() != 1 {
		t.Fatalf("the third label set was kept (cap 2); dropped %d", m.dropped.Load())
	}
	fams := gatherIstio(t, m)
	opened := fams["istio_tcp_connections_opened_total"]
	if opened == nil || len(opened.Metric) != 2 {
		t.Fatalf("istio_tcp_connections_opened_total: %v", opened)
	}
	for _, s := range opened.Metric {
		l := labelsOf(s)
		if len(l) != len(istioLabels)-2 {
			t.Errorf("%d labels: %v", len(l), l)
		}
		if _, ok := l["response_code"]; ok {
			t.Errorf("a TCP series with response_code: %v", l)
		}
		if l["destination_service_name"] == "db" && (l["request_protocol"] != "tcp" || l["destination_version"] != "v3" ||
			l["connection_security_policy"] != "none" || s.GetCounter().GetValue() != 1) {
			t.Errorf("db: %v = %v", l, s.GetCounter().GetValue())
		}
	}
	if got := fams["istio_tcp_sent_bytes_total"]; got == nil || got.Metric[0].GetCounter().GetValue()+got.Metric[1].GetCounter().GetValue() != 100 {
		t.Errorf("sent bytes: %v", got)
	}
}
