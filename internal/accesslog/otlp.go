package accesslog

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sextant-mesh/sextant/internal/otlp"
)

// LogName is the access log's name as Istio's otel provider gives it to
// Envoy (a resource attribute of every record).
const LogName = "otel_envoy_accesslog"

// OTLP's LogRecord (opentelemetry-proto, logs/v1), the fields written:
//
//	LogRecord  1 time_unix_nano (fixed64), 11 observed_time_unix_nano (fixed64),
//	           2 severity_number, 3 severity_text, 5 body (AnyValue)
const severityInfo = 9

// Exporter sends access log lines to an OpenTelemetry collector as OTLP
// log records, each line a record's body, as Envoy's OpenTelemetry access
// logger does for Istio's otel provider. Like Writer, a call never waits:
// Export queues, and what a slow or absent collector cannot take is
// dropped and counted.
type Exporter struct {
	exp  *otlp.Exporter[record]
	pool sync.Pool
}

// record is one queued line: its buffer goes back to the pool once
// encoded.
type record struct {
	at   int64 // unix nanoseconds: the call's start
	line *[]byte
}

// NewExporter starts an exporter to opts' collector (opts.ServiceName:
// the resource's service.name); the caller must Close it.
func NewExporter(opts otlp.Options) (*Exporter, error) {
	x := &Exporter{pool: sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}}
	sig := otlp.Signal[record]{
		Items:      "log records",
		GRPCMethod: "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
		HTTPPath:   "/v1/logs",
		Append:     appendRecord,
		Release:    func(r *record) { x.put(r.line); r.line = nil },
	}
	opts.ResourceAttrs = append([]otlp.Attr{otlp.String("log_name", LogName)}, opts.ResourceAttrs...)
	exp, err := otlp.New(sig, opts)
	if err != nil {
		return nil, err
	}
	x.exp = exp
	return x, nil
}

// appendRecord appends r as a LogRecord: an INFO record whose body is
// the line, without its newline.
func appendRecord(b []byte, r *record) []byte {
	line := *r.line
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(r.at))
	b = protowire.AppendTag(b, 11, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(time.Now().UnixNano()))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, severityInfo)
	b = otlp.AppendString(b, 3, "INFO")
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeBytes(len(line))))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, line)
}

// Line returns an empty buffer to append one line to, then Export. Any
// goroutine.
func (x *Exporter) Line() *[]byte {
	b := x.pool.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

// Export queues the line in b (from Line) as a record of a call that
// started at start, and takes b back. It never blocks. Any goroutine.
func (x *Exporter) Export(b *[]byte, start time.Time) {
	if !x.exp.TrySubmit(record{at: start.UnixNano(), line: b}) {
		x.put(b)
	}
}

func (x *Exporter) put(b *[]byte) {
	if cap(*b) <= 64<<10 { // an outsized line's buffer is not kept
		x.pool.Put(b)
	}
}

// Stats returns the exporter's counts of records.
func (x *Exporter) Stats() otlp.Stats { return x.exp.Stats() }

// Close exports what is queued (until ctx ends) and stops.
func (x *Exporter) Close(ctx context.Context) error { return x.exp.Close(ctx) }
