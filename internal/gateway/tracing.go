package gateway

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/otlp"
	"github.com/sextant-mesh/sextant/internal/trace"
)

// Tracing configures the gateway's spans (docs/tracing.md): each call
// routed to a cluster starts a server span, continuing the caller's trace
// (W3C or B3) or starting one, and each try upstream a client span under
// it whose context goes upstream in the caller's format.
type Tracing struct {
	Sampler trace.Sampler
	Sink    SpanSink
	// NodeID is every span's node_id attribute (the xDS node id).
	NodeID string

	// A listener's Telemetry (telemetry.go): spans not exported (context
	// still propagates), and custom tags on every span.
	noReport bool
	tags     []customTag
}

// SpanSink receives the gateway's finished spans; *trace.Exporter is one.
type SpanSink interface {
	// Submit is called on the call's goroutine; it must not block. The
	// span comes by value, so that it stays on the caller's stack.
	Submit(s trace.Span)
}

// exportStats is what a SpanSink or an AccessLogExporter may also tell,
// for /metrics.
type exportStats interface{ Stats() otlp.Stats }

var _ SpanSink = (*trace.Exporter)(nil)

// callTrace is a call's tracing state; it lives in call (on serve's
// stack), so that an untraced call allocates nothing for it.
type callTrace struct {
	t       *Tracing // nil: tracing off
	trace   trace.TraceID
	span    trace.SpanID // the gateway's server span
	parent  trace.SpanID // the caller's span; zero: none
	sampled bool
	debug   bool
	short   bool
	formats trace.Format
	kept    bool // the server span was exported (the call record keeps the trace id)
	// What the server span describes, copied when the span may be kept.
	method, url, reqID, state, proto string
	tagVals                          []string // request header custom tags' values, by tag (nil: none)
}

// startTrace starts the call's server span from the caller's context.
// injectNow: write the context upstream now, with the server span as the
// caller (the HTTP/2 upstream path, which has no per-try spans); the
// HTTP/1.1 path writes it per try (tryTrace).
func (g *Gateway) startTrace(ctx *fasthttp.RequestCtx, tr *Tracing, ct *callTrace, injectNow bool) {
	if tr == nil {
		return
	}
	h := &ctx.Request.Header
	sc, _ := trace.Extract(h) // a bad header starts a new trace, as W3C says
	ct.t = tr
	if sc.TraceID.IsValid() {
		ct.trace, ct.parent = sc.TraceID, sc.SpanID
	} else {
		ct.trace = trace.NewTraceID()
	}
	ct.span = trace.NewSpanID()
	ct.sampled = tr.Sampler.Sample(&sc, ct.trace) || sc.Debug
	ct.debug, ct.short, ct.formats = sc.Debug, sc.Short, sc.Formats
	if ct.sampled || tr.Sampler.KeepErrors {
		ct.method = known(h.Method())
		scheme := "http://"
		if ctx.IsTLS() {
			scheme = "https://"
		}
		ct.url = scheme + string(h.Host()) + string(h.RequestURI())
		ct.state = string(sc.TraceState)
		ct.proto = known(h.Protocol())
		if len(tr.tags) > 0 {
			ct.noteTags(h)
		}
	}
	if injectNow {
		inject(h, &trace.Outgoing{TraceID: ct.trace, Span: ct.span, Parent: ct.parent, Sampled: ct.sampled,
			Debug: ct.debug, Formats: ct.formats, Short: ct.short})
	}
}

// known returns b as a string, without a copy for the common methods and
// protocols.
func known(b []byte) string {
	switch string(b) { // no allocation: the compiler compares in place
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "HTTP/1.1":
		return "HTTP/1.1"
	case "HTTP/2.0":
		return "HTTP/2.0"
	}
	return string(b)
}

// addTags adds the listener's custom tags (telemetry.go) to s.
func (ct *callTrace) addTags(s *trace.Span) {
	for i, t := range ct.t.tags {
		v := t.value
		if t.header != "" && i < len(ct.tagVals) && ct.tagVals[i] != "" {
			v = ct.tagVals[i]
		}
		s.Add(trace.String(t.name, v))
	}
}

// noteTags reads the request headers custom tags name, when the span may
// be kept.
func (ct *callTrace) noteTags(h *fasthttp.RequestHeader) {
	for i, t := range ct.t.tags {
		if t.header == "" {
			continue
		}
		if v := h.Peek(t.header); len(v) > 0 {
			if ct.tagVals == nil {
				ct.tagVals = make([]string, len(ct.t.tags))
			}
			ct.tagVals[i] = string(v)
		}
	}
}

// noteRequestID keeps the request id (set by prepareRequest) for the span.
func (ct *callTrace) noteRequestID(id *requestID, h *fasthttp.RequestHeader) {
	if ct.t != nil && (ct.sampled || ct.t.Sampler.KeepErrors) {
		ct.reqID = string(id.of(h))
	}
}

// tryTrace writes a try's context upstream: a new client span under the
// server span. It returns the try's span id (zero: tracing off).
func (ct *callTrace) tryTrace(h *fasthttp.RequestHeader) trace.SpanID {
	if ct.t == nil {
		return trace.SpanID{}
	}
	id := trace.NewSpanID()
	inject(h, &trace.Outgoing{TraceID: ct.trace, Span: id, Parent: ct.span, Sampled: ct.sampled,
		Debug: ct.debug, Formats: ct.formats, Short: ct.short})
	return id
}

// inject writes o into h: W3C alone (the common case) from a buffer on the
// stack, which trace.Inject's Setter interface would move to the heap.
func inject(h *fasthttp.RequestHeader, o *trace.Outgoing) {
	if o.Formats&^trace.W3C != 0 {
		trace.Inject(h, o)
		return
	}
	var buf [64]byte
	h.SetBytesV(trace.HeaderTraceparent, trace.AppendTraceparent(buf[:0], o))
}

// failed: the call (or try) failed from the caller's point of view.
func failed(status int, reason string) bool { return status >= 500 || status == 0 || reason != "" }

// endTry exports the client span of try id of call k, which ran from t0
// for lat at endpoint addr.
func (k *call) endTry(id trace.SpanID, t0 time.Time, lat time.Duration, addr string) {
	ct := &k.tr
	if ct.t == nil || ct.t.noReport || !ct.sampled && !(ct.t.Sampler.KeepErrors && failed(k.status, k.reason)) {
		return
	}
	// The try is placed from the call's wall reading (k.start) by the
	// monotonic clock, as the server span's end is: a try's own wall
	// reading may differ by the clock's slew and put it outside its call.
	from := k.start.UnixNano() + int64(t0.Sub(k.start))
	s := trace.Span{TraceID: ct.trace, SpanID: id, Parent: ct.span, TraceState: ct.state,
		Name: tryName(k.c.name), Kind: trace.KindClient,
		Start: from, End: from + int64(lat), Error: failed(k.status, k.reason), ErrorMessage: k.reason}
	s.Add(trace.String("component", "proxy"))
	s.Add(trace.String("node_id", ct.t.NodeID))
	s.Add(trace.String("upstream_cluster", k.c.name))
	s.Add(trace.String("upstream_address", addr))
	s.Add(trace.String("http.method", ct.method))
	s.Add(trace.String("http.url", ct.url))
	s.Add(trace.Int("http.status_code", int64(k.status)))
	s.Add(trace.Int("retry.attempt", int64(k.retries)))
	if k.reason != "" {
		s.Add(trace.String("error", "true"))
		s.Add(trace.String("response_flags", k.reason))
	}
	ct.addTags(&s)
	ct.t.Sink.Submit(s)
}

// endTrace exports the call's server span, if sampled (or failed, with
// KeepErrors), and notes that it did for the call record.
func (k *call) endTrace(lat time.Duration) {
	ct := &k.tr
	if ct.t == nil || ct.t.noReport || !ct.sampled && !(ct.t.Sampler.KeepErrors && failed(k.status, k.reason)) {
		return
	}
	k.reportSpan(lat)
}

// reportSpan is endTrace's span, apart: its frame (a trace.Span) is
// large, and a call that is not traced would otherwise grow its goroutine's
// stack for it (an HTTP/2 stream's goroutine is new, its stack small).
//
//go:noinline
func (k *call) reportSpan(lat time.Duration) {
	ct := &k.tr
	ct.kept = true
	s := trace.Span{TraceID: ct.trace, SpanID: ct.span, Parent: ct.parent, TraceState: ct.state,
		Name: spanName(ct.url), Kind: trace.KindServer,
		Start: k.start.UnixNano(), End: k.start.UnixNano() + int64(lat), Error: failed(k.status, k.reason), ErrorMessage: k.reason}
	s.Add(trace.String("component", "proxy"))
	s.Add(trace.String("node_id", ct.t.NodeID))
	s.Add(trace.String("upstream_cluster", k.c.name))
	s.Add(trace.String("http.method", ct.method))
	s.Add(trace.String("http.url", ct.url))
	s.Add(trace.String("http.protocol", ct.proto))
	s.Add(trace.Int("http.status_code", int64(k.status)))
	s.Add(trace.String("guid:x-request-id", ct.reqID))
	s.Add(trace.Int("retries", int64(k.retries)))
	if k.endpoint != "" {
		s.Add(trace.String("upstream_address", k.endpoint))
	}
	if k.reason != "" {
		s.Add(trace.String("error", "true"))
		s.Add(trace.String("response_flags", k.reason))
	}
	ct.addTags(&s)
	ct.t.Sink.Submit(s)
}

// tryNames caches each cluster's try span name (Envoy's "router <cluster>
// egress"), so that a sampled try does not build it; cluster names come
// from the config, and at most maxTryNames are kept (a config churning
// names costs an allocation per try beyond, not memory).
var (
	tryNames     sync.Map // cluster name -> span name
	tryNameCount atomic.Int64
)

const maxTryNames = 10000

func tryName(cluster string) string {
	if n, ok := tryNames.Load(cluster); ok {
		return n.(string)
	}
	n := "router " + cluster + " egress"
	if tryNameCount.Add(1) <= maxTryNames {
		tryNames.Store(cluster, n)
	}
	return n
}

// spanName is Istio's operation name: the request's authority and "/*"
// (a path would make one operation per URL).
func spanName(url string) string {
	rest := url
	if i := indexOf(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if i := indexOf(rest, "/"); i >= 0 {
		rest = rest[:i]
	}
	return rest + "/*"
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// traceID is the call record's trace id: the trace's when the gateway
// exported its span, zero otherwise.
func (ct *callTrace) traceID() [16]byte {
	if ct.kept {
		return ct.trace
	}
	return [16]byte{}
}

// registerOTLPMetrics serves an OTLP exporter's counts on /metrics, as
// prefix_ITEMS_exported_total and so on (the tracer's spans, the access
// log's records).
func registerOTLPMetrics(reg *prometheus.Registry, prefix, items, what string, st exportStats) {
	c := func(name, help string, f func(otlp.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_" + name, Help: help}, func() float64 { return float64(f(st.Stats())) })
	}
	reg.MustRegister(
		c(items+"_exported_total", what+" the OTLP collector accepted.",
			func(s otlp.Stats) uint64 { return s.Exported }),
		c(items+"_dropped_queue_full_total", what+" dropped because the export queue was full (the collector slow or down).",
			func(s otlp.Stats) uint64 { return s.DroppedFull }),
		c(items+"_dropped_export_failed_total", what+" dropped because their export failed or the collector rejected them.",
			func(s otlp.Stats) uint64 { return s.DroppedError }),
		c("exports_failed_total", "OTLP export requests that failed.",
			func(s otlp.Stats) uint64 { return s.ExportErrors }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_queue_" + items, Help: what + " waiting for export."},
			func() float64 { return float64(st.Stats().Queued) }),
	)
}
