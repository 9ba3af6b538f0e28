package client

import (
	"context"
	"net/http"

	"github.com/sextant-mesh/sextant/internal/trace"
)

// traceHeaders are the headers of a call's trace context that a service
// passes from the request it serves to the calls it makes (Istio asks
// services to propagate them; the gateway and sidecars continue the trace
// from them).
var traceHeaders = []string{
	trace.HeaderTraceparent, trace.HeaderTracestate,
	trace.HeaderB3, trace.HeaderB3TraceID, trace.HeaderB3SpanID, trace.HeaderB3ParentSpan,
	trace.HeaderB3Sampled, trace.HeaderB3Flags,
	"X-Request-Id",
}

type traceKey struct{}

// WithTraceContext returns a context carrying the trace context of an
// incoming request's header in (W3C traceparent/tracestate, B3 single or
// multi-header, and x-request-id): requests made with it through a
// RoundTripper carry the same headers, so that the mesh's proxies see
// one trace across the service. Invalid trace headers are not carried
// (the proxies would start a new trace for them anyway).
//
//	func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
//		ctx := client.WithTraceContext(r.Context(), r.Header)
//		req, _ := http.NewRequestWithContext(ctx, "GET", "http://inventory/items", nil)
//		resp, err := s.httpClient.Do(req) // an http.Client over a client.RoundTripper
//		...
//	}
func WithTraceContext(ctx context.Context, in http.Header) context.Context {
	if _, err := trace.Extract(trace.HTTPHeader(in)); err != nil {
		// Keep only x-request-id: a bad trace header would be refused
		// by the next proxy anyway.
		if id := in.Get("X-Request-Id"); id != "" {
			return context.WithValue(ctx, traceKey{}, http.Header{"X-Request-Id": {id}})
		}
		return ctx
	}
	h := http.Header{}
	for _, k := range traceHeaders {
		if v := in.Values(k); len(v) > 0 {
			h[k] = append([]string(nil), v...)
		}
	}
	if len(h) == 0 {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, h)
}

// propagateTrace sets on out the trace headers of its context that it
// does not set itself.
func propagateTrace(out *http.Request) {
	h, _ := out.Context().Value(traceKey{}).(http.Header)
	if h == nil {
		return
	}
	for _, k := range traceHeaders {
		if _, set := out.Header[k]; set {
			return // the caller wrote its own context: keep it whole
		}
	}
	for k, v := range h {
		out.Header[k] = append([]string(nil), v...)
	}
}

// TraceContext returns the trace headers ctx carries (WithTraceContext's),
// nil for none: for transports other than HTTP, such as gRPC's metadata
// (grpcresolver's interceptors). The header is the caller's to read only.
func TraceContext(ctx context.Context) http.Header {
	h, _ := ctx.Value(traceKey{}).(http.Header)
	return h
}
