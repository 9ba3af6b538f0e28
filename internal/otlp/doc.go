// Package otlp owns export to an OpenTelemetry collector over OTLP, for
// any signal (the gateway's spans and its access log records): a queue
// bounded in memory that drops, counted, what a slow or absent collector
// cannot take, batches sent from one goroutine over gRPC or HTTP/protobuf,
// the envelope every signal shares (resource, instrumentation scope) and
// the collector's partial-success answer.
//
// It does not own what an item says: a Signal appends one encoded item
// (a Span, a LogRecord) and the owner of that signal writes it
// (internal/trace, internal/accesslog).
package otlp
