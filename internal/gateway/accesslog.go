package gateway

import (
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/accesslog"
	"github.com/sextant-mesh/sextant/internal/calllog"
)

// AccessLog configures the gateway's access log (docs/telemetry.md): a
// line per call in Istio's default text or JSON format, for the calls a
// listener's Telemetry selects, or for every call with All.
type AccessLog struct {
	Sink AccessLogSink
	// OTel takes the lines of access logs of the otel provider, as OTLP
	// log records (--access-log-otlp-endpoint); nil: those are not
	// written.
	OTel AccessLogExporter
	// All logs every call in Encoding on listeners whose Telemetry names
	// no access log (--access-log text|json, as Istio's accessLogFile).
	All      bool
	Encoding accesslog.Encoding
}

// AccessLogSink takes the gateway's lines; *accesslog.Writer is one.
type AccessLogSink interface {
	// Line returns an empty buffer for one line. Call's goroutine; never
	// blocks.
	Line() *[]byte
	// Submit queues the line and takes the buffer back. Call's goroutine;
	// never blocks (a line it cannot queue is dropped and counted).
	Submit(b *[]byte)
}

var _ AccessLogSink = (*accesslog.Writer)(nil)

// AccessLogExporter takes the gateway's lines for OTLP; *accesslog.Exporter
// is one.
type AccessLogExporter interface {
	// Line returns an empty buffer for one line. Call's goroutine.
	Line() *[]byte
	// Export queues the line of a call that started at start and takes
	// the buffer back. Call's goroutine; never blocks.
	Export(b *[]byte, start time.Time)
}

var _ AccessLogExporter = (*accesslog.Exporter)(nil)

// accessLogStats is what an AccessLogSink may also tell, for /metrics.
type accessLogStats interface{ Stats() accesslog.Stats }

func registerAccessLogMetrics(reg *prometheus.Registry, st accessLogStats) {
	c := func(name, help string, f func(accesslog.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(st.Stats())) })
	}
	reg.MustRegister(
		c("sextant_gateway_access_log_lines_total", "Access log lines written.", func(s accesslog.Stats) uint64 { return s.Written }),
		c("sextant_gateway_access_log_dropped_total", "Access log lines dropped because the writer's queue was full (the disk slower than the calls).",
			func(s accesslog.Stats) uint64 { return s.Dropped }),
		c("sextant_gateway_access_log_rotations_total", "Access log files rotated.", func(s accesslog.Stats) uint64 { return s.Rotations }),
		c("sextant_gateway_access_log_errors_total", "Access log writes that failed.", func(s accesslog.Stats) uint64 { return s.Errors }),
	)
}

// noteURI keeps the request URI for the access log when the route will
// rewrite it (Envoy logs x-envoy-original-path); before prepareRequest.
func (k *call) noteURI(ctx *fasthttp.RequestCtx, r *routeRT) {
	if len(k.logs) > 0 && r.spec.rewrite != "" {
		k.uri = append([]byte(nil), ctx.Request.Header.RequestURI()...)
	}
}

// logAccess writes the call's line to each access log whose filter it
// passes. k may be nil (a call answered before it had a cluster: no
// route, a redirect); out is the answer's body bytes (negative: ctx's
// response body). Call's goroutine.
func (g *Gateway) logAccess(ctx *fasthttp.RequestCtx, logs []accessLogSpec, k *call, route string, start time.Time, lat time.Duration, out int64) {
	status := ctx.Response.StatusCode()
	if k != nil && k.status != 0 {
		status = k.status
	}
	var e *accesslog.Entry
	var entry accesslog.Entry
	for _, s := range logs {
		if s.filter != nil && !s.filter.match(status, lat) {
			continue
		}
		if e == nil {
			e = &entry
			g.accessEntry(e, ctx, k, route, status, start, lat)
			if out >= 0 {
				e.BytesOut = out
			}
		}
		switch s.enc {
		case accesslog.OTel: // only with an exporter (effectiveLogs)
			x := g.opts.AccessLog.OTel
			b := x.Line()
			*b = accesslog.AppendText(*b, e)
			x.Export(b, e.Start)
		case accesslog.JSON:
			b := g.opts.AccessLog.Sink.Line()
			*b = accesslog.AppendJSON(*b, e)
			g.opts.AccessLog.Sink.Submit(b)
		default:
			b := g.opts.AccessLog.Sink.Line()
			*b = accesslog.AppendText(*b, e)
			g.opts.AccessLog.Sink.Submit(b)
		}
	}
}

func (g *Gateway) accessEntry(e *accesslog.Entry, ctx *fasthttp.RequestCtx, k *call, route string, status int, start time.Time, lat time.Duration) {
	h := &ctx.Request.Header
	*e = accesslog.Entry{Start: start, Method: h.Method(), Path: h.RequestURI(), Protocol: protocolName(h),
		Code: status, Duration: lat, UpstreamTime: -1, XForwardedFor: h.Peek("X-Forwarded-For"),
		UserAgent: h.UserAgent(), RequestID: h.Peek("X-Request-Id"), Authority: h.Host(), Route: route,
		BytesOut:        int64(len(ctx.Response.Body())),
		DownstreamLocal: addrPortOf(ctx.LocalAddr()), DownstreamRemote: addrPortOf(ctx.RemoteAddr())}
	if !ctx.Request.IsBodyStream() {
		e.BytesIn = int64(len(ctx.Request.Body()))
	}
	if ctx.IsTLS() {
		e.ServerName = []byte(ctx.TLSConnectionState().ServerName)
	}
	reason := string(ctx.Response.Header.Peek(ErrorHeader))
	retries := 0
	if k != nil && k.h2 {
		e.Protocol = "HTTP/2"
	}
	if k != nil && k.c != nil {
		reason, retries = k.reason, k.retries
		if len(k.uri) > 0 {
			e.Path = k.uri
		}
		if k.body != nil {
			e.BytesIn = k.body.n
		} else if k.bytesIn > 0 {
			e.BytesIn = k.bytesIn
		}
		e.UpstreamCluster, e.UpstreamHost = k.c.name, k.endpoint
		if k.err == nil && k.status > 0 && k.endpoint != "" && k.reason == "" {
			e.UpstreamTime = k.upLat
		}
	}
	if f := istioFlagsOf(calllog.ReasonCode(reason), uint16(status), uint8(min(retries, 255))); f != flagNone {
		e.Flags = istioFlagNames[f]
	}
	if k != nil && k.c == nil {
		k = nil // answered before it had a cluster
	}
	e.Details = codeDetails(reason, k)
}

// codeDetails is Envoy's %RESPONSE_CODE_DETAILS% for a call that ended
// for reason ("": the upstream answered).
func codeDetails(reason string, k *call) string {
	switch reason {
	case "":
		if k == nil || k.status == 0 {
			return "downstream_remote_disconnect"
		}
		return "via_upstream"
	case reasonNoRoute:
		return "route_not_found"
	case reasonNoCluster:
		return "cluster_not_found"
	case reasonNoHealthy, reasonNoSubset:
		return "no_healthy_upstream"
	case reasonTimeout:
		return "response_timeout"
	case reasonConnect, reasonTLS:
		return "upstream_reset_before_response_started{connection_failure}"
	case reasonReset:
		return "upstream_reset_before_response_started{connection_termination}"
	case reasonOverflow, reasonShed:
		return "upstream_reset_before_response_started{overflow}"
	case reasonRBAC:
		if k != nil && k.detail != "" {
			return "rbac_access_denied_matched_policy[" + k.detail + "]"
		}
		return "rbac_access_denied_matched_policy[none]"
	case reasonJWT:
		// Envoy's: the verification status, without spaces.
		if k != nil && k.detail != "" {
			return "jwt_authn_access_denied{" + strings.ReplaceAll(k.detail, " ", "_") + "}"
		}
		return "jwt_authn_access_denied"
	}
	return reason
}

func protocolName(h *fasthttp.RequestHeader) string {
	switch string(h.Protocol()) {
	case "HTTP/1.1":
		return "HTTP/1.1"
	case "HTTP/1.0":
		return "HTTP/1.0"
	case "HTTP/2.0", "HTTP/2":
		return "HTTP/2"
	}
	return string(h.Protocol())
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if ta, ok := a.(interface{ AddrPort() netip.AddrPort }); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
