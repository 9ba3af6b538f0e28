package gateway

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// Istio's standard metrics (istio.io/latest/docs/reference/config/metrics/),
// kept from the call records the gateway makes, so that Istio's Grafana
// dashboards and Kiali read the gateway as they read Envoy. Each label set
// is counted once per call in plain atomics and written out for every
// configured reporter at scrape time: a call costs the same whatever the
// number of reporters, and a series holds a few hundred bytes instead of a
// client_golang histogram's few kilobytes.

// Istio's label names, in Istio's order (the TCP metrics leave out
// request_protocol's HTTP-only neighbours response_code and
// grpc_response_status).
var istioLabels = []string{"reporter",
	"source_workload", "source_workload_namespace", "source_principal", "source_app", "source_version",
	"source_canonical_service", "source_canonical_revision", "source_cluster",
	"destination_workload", "destination_workload_namespace", "destination_principal", "destination_app",
	"destination_version", "destination_service", "destination_service_name", "destination_service_namespace",
	"destination_canonical_service", "destination_canonical_revision", "destination_cluster",
	"request_protocol", "response_code", "grpc_response_status", "response_flags", "connection_security_policy"}

// Istio's buckets: request duration in milliseconds, and sizes
// exponential from 1 to 1e9 bytes (Istio's stats filter defaults).
var (
	istioDurationBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}
	istioBytesBuckets    = []float64{1, 10, 100, 1000, 10000, 100000, 1e6, 1e7, 1e8, 1e9}
)

// IstioReporters are the reporter values Options.IstioReporters may hold.
var IstioReporters = []string{"source", "destination"}

// DefaultIstioMaxSeries bounds the label sets the Istio metrics keep.
const DefaultIstioMaxSeries = 10000

// istioCluster is the value of source_cluster and destination_cluster:
// Istio's default cluster id.
const istioCluster = "Kubernetes"

// istioKey is what tells one label set from another; every label follows
// from it (istioLabelValues).
type istioKey struct {
	service   string // the cluster's service: "namespace/name" (Sextant's) or a name
	subset    string // calllog.Record.Subset
	principal string // the caller's SPIFFE id; "" without a client certificate
	code      uint16
	grpc      uint8 // calllog.Record.GRPCStatus: grpc-status+1, 0 for none
	flags     uint8 // index into istioFlagNames
	mtls      bool
	// A sidecar's call (istiosidecar.go): dir says which proxy of the
	// call it is (reporter destination inbound, source outbound; 0: the
	// gateway, both), peer the destination's SPIFFE id.
	dir  uint8
	peer string
}

// istioHist is a histogram in atomics: per-bucket (not cumulative)
// counts, the last one +Inf, and the sum in the unit's integer.
type istioHist struct {
	counts []atomic.Uint64
	sum    atomic.Uint64
}

func newIstioHist(bounds []float64) istioHist {
	return istioHist{counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (h *istioHist) observe(bounds []float64, v float64, sum uint64) {
	i := 0
	for i < len(bounds) && v > bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(sum)
}

// snapshot returns the count, the cumulative buckets (the count is their
// total, so a scrape racing observations stays consistent) and the sum.
func (h *istioHist) snapshot(bounds []float64, scale float64) (uint64, map[float64]uint64, float64) {
	b := make(map[float64]uint64, len(bounds))
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
		if i < len(bounds) {
			b[bounds[i]] = n
		}
	}
	return n, b, float64(h.sum.Load()) * scale
}

type istioSeries struct {
	key      istioKey // zero for the overflow series
	values   []string // label values after reporter
	reporter string   // the one reporter of a sidecar's series; "": every configured one
	requests atomic.Uint64
	duration istioHist // nanoseconds summed
	reqBytes istioHist
	resBytes istioHist
}

// istioMetrics is a Recorder in front of the gateway's own: it counts
// each call in Istio's metrics, then hands the record on.
type istioMetrics struct {
	next      Recorder
	reporters []string
	max       int

	// last is the series of the last call counted: most calls in a row
	// share their label set, and the key's compare is cheaper than the
	// map's hash under a read lock. Series are never removed, so a cached
	// one stays valid.
	last     atomic.Pointer[istioSeries]
	mu       sync.RWMutex
	series   map[istioKey]*istioSeries
	overflow *istioSeries // label set "other", once max is reached
	dropped  atomic.Uint64
	tcp      map[istioKey]*istioTCPSeries // istiotcp.go; counted in max too
	tcpOver  *istioTCPSeries

	// sidecar: the records are a sidecar's (istiosidecar.go); nil for a
	// gateway. self is the sidecar's own SPIFFE id once it has one.
	sidecar bool
	self    atomic.Pointer[string]

	requests, duration, reqBytes, resBytes     *prometheus.Desc
	tcpOpened, tcpClosed, tcpSent, tcpReceived *prometheus.Desc
	overflowDesc, seriesDesc                   *prometheus.Desc
}

func newIstioMetrics(next Recorder, reporters []string, max int) *istioMetrics {
	if len(reporters) == 0 {
		reporters = IstioReporters
	}
	// A reporter named twice would write every series twice: a scrape error.
	reporters = slices.Compact(slices.Sorted(slices.Values(reporters)))
	if max <= 0 {
		max = DefaultIstioMaxSeries
	}
	return &istioMetrics{next: next, reporters: reporters, max: max, series: map[istioKey]*istioSeries{}, tcp: map[istioKey]*istioTCPSeries{},
		tcpOpened:   prometheus.NewDesc("istio_tcp_connections_opened_total", "TCP connections opened, as Istio counts them.", istioTCPLabels, nil),
		tcpClosed:   prometheus.NewDesc("istio_tcp_connections_closed_total", "TCP connections closed.", istioTCPLabels, nil),
		tcpSent:     prometheus.NewDesc("istio_tcp_sent_bytes_total", "Bytes sent to the client (the response direction) on TCP connections.", istioTCPLabels, nil),
		tcpReceived: prometheus.NewDesc("istio_tcp_received_bytes_total", "Bytes received from the client (the request direction) on TCP connections.", istioTCPLabels, nil),
		requests:    prometheus.NewDesc("istio_requests_total", "Requests, as Istio counts them.", istioLabels, nil),
		duration:    prometheus.NewDesc("istio_request_duration_milliseconds", "Request duration in milliseconds, as Istio measures it.", istioLabels, nil),
		reqBytes:    prometheus.NewDesc("istio_request_bytes", "Request body sizes in bytes.", istioLabels, nil),
		resBytes:    prometheus.NewDesc("istio_response_bytes", "Response body sizes in bytes.", istioLabels, nil),
		overflowDesc: prometheus.NewDesc("sextant_gateway_istio_metrics_overflow_total",
			"Calls counted in the Istio metrics' label set \"other\" because the gateway already keeps --istio-metrics-max-series label sets.", nil, nil),
		seriesDesc: prometheus.NewDesc("sextant_gateway_istio_metrics_label_sets",
			"Label sets the Istio metrics keep (each is one series per metric and reporter).", nil, nil),
	}
}

// Record counts r and hands it on. It takes a read lock only, except
// for a label set's first call.
func (m *istioMetrics) Record(r calllog.Record) {
	m.observe(&r)
	if m.next != nil {
		m.next.Record(r)
	}
}

func (m *istioMetrics) observe(r *calllog.Record) {
	k := istioKey{service: r.Service, subset: r.Subset, principal: r.Principal, code: r.Status, grpc: r.GRPCStatus,
		flags: istioFlagsOf(r.Reason, r.Status, r.Retries), mtls: r.Conn&calllog.ConnPeerCert != 0}
	if m.sidecar {
		m.sidecarKey(&k, r)
	}
	s := m.last.Load()
	if s == nil || s.key != k {
		m.mu.RLock()
		s = m.series[k]
		m.mu.RUnlock()
		if s == nil {
			s = m.add(k)
		}
		if s.key == k { // not the overflow (whose key is zero) for another key
			m.last.Store(s)
		}
	}
	s.requests.Add(1)
	ns := max(r.Latency.Nanoseconds(), 0)
	s.duration.observe(istioDurationBuckets, float64(ns)/1e6, uint64(ns))
	s.reqBytes.observe(istioBytesBuckets, float64(r.BytesIn), uint64(r.BytesIn))
	s.resBytes.observe(istioBytesBuckets, float64(r.BytesOut), uint64(r.BytesOut))
}

// add makes k's series, or counts the call in "other" at the cap.
func (m *istioMetrics) add(k istioKey) *istioSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.series[k]; s != nil {
		return s
	}
	if len(m.series)+len(m.tcp) >= m.max {
		m.dropped.Add(1)
		if m.overflow == nil {
			vals := make([]string, len(istioLabels)-1)
			for i := range vals {
				vals[i] = "other"
			}
			m.overflow = newIstioSeries(vals)
		}
		return m.overflow
	}
	s := newIstioSeries(istioLabelValues(k))
	s.key = k
	s.reporter = istioReporterOf(k.dir)
	m.series[k] = s
	return s
}

func newIstioSeries(vals []string) *istioSeries {
	return &istioSeries{values: vals, duration: newIstioHist(istioDurationBuckets),
		reqBytes: newIstioHist(istioBytesBuckets), resBytes: newIstioHist(istioBytesBuckets)}
}

// istioLabelValues are k's label values, in istioLabels' order after
// reporter. The destination is the cluster's service: Sextant names it
// "namespace/name", which Istio writes name.namespace.svc.cluster.local;
// its workload is the service (a Sextant service is one workload), its
// version the subset's. The source is the client certificate's SPIFFE id
// (spiffe://trust-domain/ns/NAMESPACE/sa/ACCOUNT): workload is the
// service account, the only workload name a certificate carries (Istio
// reads the caller's from its proxy's metadata, which the gateway does
// not get); without a certificate Istio writes "unknown".
func istioLabelValues(k istioKey) []string {
	const unknown = "unknown"
	dstNS, dstName, ok := strings.Cut(k.service, "/")
	if !ok {
		dstNS, dstName = unknown, k.service
	}
	if dstName == "" {
		dstName = unknown
	}
	dstSvc := dstName
	if ok {
		dstSvc = dstName + "." + dstNS + ".svc.cluster.local"
	}
	version := subsetVersion(k.subset)
	revision := version
	if revision == unknown {
		revision = "latest" // Istio's canonical revision default
	}
	srcWL, srcNS, srcPrincipal := unknown, unknown, unknown
	if k.principal != "" {
		srcPrincipal = k.principal
		if ns, sa, ok := spiffeNamespaceAccount(k.principal); ok {
			srcNS, srcWL = ns, sa
		}
	}
	srcRevision := "latest"
	if srcWL == unknown {
		srcRevision = unknown
	}
	proto, grpc := "http", ""
	if k.grpc != 0 {
		proto, grpc = "grpc", strconv.Itoa(int(k.grpc)-1)
	}
	policy := "none"
	if k.mtls {
		policy = "mutual_tls"
	}
	dstPrincipal := unknown
	if k.peer != "" {
		dstPrincipal = k.peer
	}
	return []string{
		srcWL, srcNS, srcPrincipal, srcWL, unknown, srcWL, srcRevision, istioCluster,
		dstName, dstNS, dstPrincipal, dstName, version, dstSvc, dstName, dstNS, dstName, revision, istioCluster,
		proto, strconv.Itoa(int(k.code)), grpc, istioFlagNames[k.flags], policy,
	}
}

// subsetVersion is the version a call record's subset names: its
// version=V pair, or the subset cluster's name; "unknown" for none.
func subsetVersion(subset string) string {
	if subset == "" {
		return "unknown"
	}
	if !strings.Contains(subset, "=") {
		return subset
	}
	for kv := range strings.SplitSeq(subset, ",") {
		if v, ok := strings.CutPrefix(kv, "version="); ok && v != "" {
			return v
		}
	}
	return "unknown"
}

// spiffeNamespaceAccount reads spiffe://TD/ns/NS/sa/SA.
func spiffeNamespaceAccount(id string) (ns, sa string, ok bool) {
	rest, ok := strings.CutPrefix(id, "spiffe://")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || parts[1] != "ns" || parts[3] != "sa" || parts[2] == "" || parts[4] == "" {
		return "", "", false
	}
	return parts[2], parts[4], true
}

// Envoy's response flags for what the gateway can tell; "-" for none.
var istioFlagNames = [...]string{"-", "NR", "NC", "UH", "UO", "UT", "UF", "UC", "DPE", "RBAC", "DC",
	"UF,URX", "UC,URX", "UT,URX"}

const (
	flagNone uint8 = iota
	flagNoRoute
	flagNoCluster
	flagNoHealthy
	flagOverflow
	flagTimeout
	flagConnect
	flagReset
	flagDownstreamProtocol
	flagRBAC
	flagDownstreamDisconnect
	flagConnectRetries
	flagResetRetries
	flagTimeoutRetries
)

// istioFlagsOf maps a call record's reason to Envoy's response flags.
// A failed upstream attempt after retries adds URX (retry limit
// exceeded), as Envoy does. Reasons with no Envoy flag (a response over
// the size limit, a bad subset header, a failed upgrade, a request body
// over the limit) are "-", as Envoy's local replies for them are.
func istioFlagsOf(reason calllog.Reason, status uint16, retries uint8) uint8 {
	switch reason {
	case calllog.ReasonNone:
		if status == 0 {
			return flagDownstreamDisconnect
		}
		return flagNone
	case calllog.ReasonNoRoute:
		return flagNoRoute
	case calllog.ReasonNoCluster:
		return flagNoCluster
	case calllog.ReasonNoHealthy, calllog.ReasonNoSubset:
		return flagNoHealthy
	case calllog.ReasonShed, calllog.ReasonOverflow:
		return flagOverflow
	case calllog.ReasonTimeout:
		if retries > 0 {
			return flagTimeoutRetries
		}
		return flagTimeout
	case calllog.ReasonConnect, calllog.ReasonTLS:
		if retries > 0 {
			return flagConnectRetries
		}
		return flagConnect
	case calllog.ReasonReset:
		if retries > 0 {
			return flagResetRetries
		}
		return flagReset
	case calllog.ReasonBadRequestBody:
		return flagDownstreamProtocol
	case calllog.ReasonRBACDenied:
		return flagRBAC
	}
	return flagNone
}

// Describe implements prometheus.Collector.
func (m *istioMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.requests, m.duration, m.reqBytes, m.resBytes, m.overflowDesc, m.seriesDesc,
		m.tcpOpened, m.tcpClosed, m.tcpSent, m.tcpReceived} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: every label set once per
// reporter.
func (m *istioMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.RLock()
	all := make([]*istioSeries, 0, len(m.series)+1)
	for _, s := range m.series {
		all = append(all, s)
	}
	if m.overflow != nil {
		all = append(all, m.overflow)
	}
	n := len(m.series) + len(m.tcp)
	m.mu.RUnlock()
	m.collectTCP(ch)
	ch <- prometheus.MustNewConstMetric(m.overflowDesc, prometheus.CounterValue, float64(m.dropped.Load()))
	ch <- prometheus.MustNewConstMetric(m.seriesDesc, prometheus.GaugeValue, float64(n))
	for _, s := range all {
		reporters := m.reporters
		if s.reporter != "" {
			reporters = []string{s.reporter}
		}
		dn, db, dsum := s.duration.snapshot(istioDurationBuckets, 1e-6)
		qn, qb, qsum := s.reqBytes.snapshot(istioBytesBuckets, 1)
		rn, rb, rsum := s.resBytes.snapshot(istioBytesBuckets, 1)
		req := float64(s.requests.Load())
		for _, rep := range reporters {
			vals := append([]string{rep}, s.values...)
			if rep == "source" && s != m.overflow {
				// As Istio's: the caller's proxy does not know how the
				// destination's accepted the connection.
				vals[len(vals)-1] = "unknown"
			}
			ch <- prometheus.MustNewConstMetric(m.requests, prometheus.CounterValue, req, vals...)
			ch <- prometheus.MustNewConstHistogram(m.duration, dn, dsum, db, vals...)
			ch <- prometheus.MustNewConstHistogram(m.reqBytes, qn, qsum, qb, vals...)
			ch <- prometheus.MustNewConstHistogram(m.resBytes, rn, rsum, rb, vals...)
		}
	}
}
