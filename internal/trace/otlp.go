package trace

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// The OTLP trace protocol (opentelemetry-proto, trace/v1 and
// collector/trace/v1), written with protowire into reused buffers: the
// handful of fields a span has do not need the generated types'
// allocations (nor go.opentelemetry.io/proto/otlp's dependencies, which
// include grpc-gateway). Field numbers:
//
//	ExportTraceServiceRequest  1 resource_spans
//	ResourceSpans              1 resource, 2 scope_spans
//	Resource                   1 attributes
//	ScopeSpans                 1 scope, 2 spans
//	InstrumentationScope       1 name, 2 version
//	Span                       1 trace_id, 2 span_id, 3 trace_state, 4 parent_span_id, 5 name,
//	                           6 kind, 7 start_time_unix_nano (fixed64), 8 end_time_unix_nano
//	                           (fixed64), 9 attributes, 15 status, 16 flags (fixed32)
//	Status                     2 message, 3 code (2: ERROR)
//	KeyValue                   1 key, 2 value
//	AnyValue                   1 string_value, 3 int_value
const (
	scopeName    = "sextant"
	statusError  = 2
	flagSampled  = 1 << 0
	flagIsRemote = 1 << 9 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	flagRemote   = 1 << 8 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
)

// encoder builds export requests; it belongs to the exporter's goroutine.
type encoder struct {
	resource []byte // the encoded Resource, once
	scope    []byte // the encoded InstrumentationScope, once
	out      []byte
	spans    []byte
	one      []byte
}

func newEncoder(service string, attrs []Attr) *encoder {
	e := &encoder{}
	e.resource = appendKV(e.resource, 1, String("service.name", service))
	for _, a := range attrs {
		e.resource = appendKV(e.resource, 1, a)
	}
	e.scope = protowire.AppendTag(e.scope, 1, protowire.BytesType)
	e.scope = protowire.AppendString(e.scope, scopeName)
	return e
}

// request encodes spans as one ExportTraceServiceRequest; the result is
// valid until the next call.
func (e *encoder) request(spans []Span) []byte {
	e.spans = e.spans[:0]
	for i := range spans {
		e.one = appendSpan(e.one[:0], &spans[i])
		e.spans = protowire.AppendTag(e.spans, 2, protowire.BytesType)
		e.spans = protowire.AppendBytes(e.spans, e.one)
	}
	// ScopeSpans = scope + spans
	scopeSpans := protowire.SizeTag(1) + protowire.SizeBytes(len(e.scope)) + len(e.spans)
	// ResourceSpans = resource + scope_spans
	rs := protowire.SizeTag(1) + protowire.SizeBytes(len(e.resource)) + protowire.SizeTag(2) + protowire.SizeBytes(scopeSpans)
	b := e.out[:0]
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(rs))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, e.resource)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(scopeSpans))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, e.scope)
	b = append(b, e.spans...)
	e.out = b
	return b
}

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
		b = appendKV(b, 9, a)
	}
	for _, a := range s.more {
		b = appendKV(b, 9, a)
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

// appendKV appends a as KeyValue field num.
func appendKV(b []byte, num protowire.Number, a Attr) []byte {
	var av int
	if a.IsInt {
		av = protowire.SizeTag(3) + protowire.SizeVarint(uint64(a.Int))
	} else {
		av = protowire.SizeTag(1) + protowire.SizeBytes(len(a.Str))
	}
	kv := protowire.SizeTag(1) + protowire.SizeBytes(len(a.Key)) + protowire.SizeTag(2) + protowire.SizeBytes(av)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kv))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, a.Key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(av))
	if a.IsInt {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(a.Int))
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendString(b, a.Str)
}

// partialSuccess reads an ExportTraceServiceResponse: the spans the
// collector rejected (partial_success = 1 {rejected_spans = 1, error_message = 2}).
func partialSuccess(b []byte) (rejected int64, msg string) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, ""
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return 0, ""
			}
			b = b[n:]
			continue
		}
		ps, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, ""
		}
		b = b[n:]
		for len(ps) > 0 {
			num, typ, n := protowire.ConsumeTag(ps)
			if n < 0 {
				return rejected, msg
			}
			ps = ps[n:]
			switch {
			case num == 1 && typ == protowire.VarintType:
				v, n := protowire.ConsumeVarint(ps)
				if n < 0 {
					return rejected, msg
				}
				rejected, ps = int64(v), ps[n:]
			case num == 2 && typ == protowire.BytesType:
				v, n := protowire.ConsumeBytes(ps)
				if n < 0 {
					return rejected, msg
				}
				msg, ps = string(v), ps[n:]
			default:
				if n = protowire.ConsumeFieldValue(num, typ, ps); n < 0 {
					return rejected, msg
				}
				ps = ps[n:]
			}
		}
	}
	return rejected, msg
}
