package trace

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sextant-mesh/sextant/internal/otlp"
)

// The OTLP trace protocol (opentelemetry-proto, trace/v1), written with
// protowire into reused buffers: the handful of fields a span has do not
// need the generated types' allocations (nor go.opentelemetry.io/proto/otlp's
// dependencies, which include grpc-gateway). The envelope is otlp's;
// field numbers:
//
//	Span                       1 trace_id, 2 span_id, 3 trace_state, 4 parent_span_id, 5 name,
//	                           6 kind, 7 start_time_unix_nano (fixed64), 8 end_time_unix_nano
//	                           (fixed64), 9 attributes, 15 status, 16 flags (fixed32)
//	Status                     2 message, 3 code (2: ERROR)
//	KeyValue                   1 key, 2 value
//	AnyValue                   1 string_value, 3 int_value
const (
	statusError  = 2
	flagSampled  = 1 << 0
	flagIsRemote = 1 << 9 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	flagRemote   = 1 << 8 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
)

// appendSpan appends s as an OTLP Span.
func appendSpan(b []byte, s *Span) []byte {
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, s.TraceID[:])
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, s.SpanID[:])
	if s.TraceState != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, s.TraceState)
	}
	if s.Parent.IsValid() {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, s.Parent[:])
	}
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendString(b, s.Name)
	b = protowire.AppendTag(b, 6, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(s.Kind))
	b = protowire.AppendTag(b, 7, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(s.Start))
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(s.End))
	for _, a := range s.fixed[:s.nFixed] {
		b = otlp.AppendKV(b, 9, a)
	}
	for _, a := range s.more {
		b = otlp.AppendKV(b, 9, a)
	}
	if s.Error {
		st := protowire.SizeTag(3) + protowire.SizeVarint(statusError)
		if s.ErrorMessage != "" {
			st += protowire.SizeTag(2) + protowire.SizeBytes(len(s.ErrorMessage))
		}
		b = protowire.AppendTag(b, 15, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(st))
		if s.ErrorMessage != "" {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendString(b, s.ErrorMessage)
		}
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, statusError)
	}
	flags := uint32(flagSampled | flagIsRemote)
	if s.Kind == KindServer && s.Parent.IsValid() {
		flags |= flagRemote // its parent is the caller's
	}
	b = protowire.AppendTag(b, 16, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, flags)
}
