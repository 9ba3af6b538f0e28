// Package trace owns the gateway's distributed tracing: reading and writing
// trace context in W3C Trace Context (traceparent, tracestate) and Zipkin's
// B3 (multi-header and single "b3") headers, ids, the sampling decision,
// and an OTLP exporter (gRPC or HTTP/protobuf) that batches finished spans
// in bounded memory and drops, counted, what a slow or absent collector
// cannot take, so that a call never waits for it.
//
// It does not own what a span describes (the gateway fills Span) nor where
// the configuration comes from (flags, the Telemetry kind). See
// docs/tracing.md.
package trace
