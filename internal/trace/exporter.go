package trace

import "github.com/sextant-mesh/sextant/internal/otlp"

// Protocols of ExporterOptions.Protocol.
const (
	ProtocolGRPC = otlp.ProtocolGRPC // OTLP/gRPC, TraceService.Export (port 4317 by convention)
	ProtocolHTTP = otlp.ProtocolHTTP // OTLP/HTTP, POST /v1/traces (port 4318)
)

// ExporterOptions configure an Exporter (otlp.Options); an HTTP
// endpoint's path, when empty, is /v1/traces; the service name defaults
// to sextant-gateway.
type ExporterOptions = otlp.Options

// Stats are an exporter's counts of spans since it started.
type Stats = otlp.Stats

// Exporter sends finished spans to an OTLP collector (otlp.Exporter).
type Exporter = otlp.Exporter[Span]

// spans is OTLP's trace signal.
var spans = otlp.Signal[Span]{
	Items:      "spans",
	GRPCMethod: "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
	HTTPPath:   "/v1/traces",
	Append:     appendSpan,
}

// NewExporter checks opts and starts the exporter's goroutine; the caller
// must Close it. It does not connect: a collector that is down only makes
// exports fail.
func NewExporter(opts ExporterOptions) (*Exporter, error) {
	return otlp.New(spans, opts)
}

// newEncoder encodes ExportTraceServiceRequests.
func newEncoder(service string, attrs []Attr) *otlp.Encoder[Span] {
	return otlp.NewEncoder(&spans, service, attrs)
}
