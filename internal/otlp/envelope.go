package otlp

import "google.golang.org/protobuf/encoding/protowire"

// ScopeName is the instrumentation scope of everything exported.
const ScopeName = "sextant"

// Every signal's export request nests its items alike, with the same
// field numbers (traces: ResourceSpans, ScopeSpans, spans; logs:
// ResourceLogs, ScopeLogs, log_records):
//
//	Export<Signal>ServiceRequest  1 resource_<signal>
//	Resource<Signal>              1 resource, 2 scope_<signal>
//	Resource                      1 attributes
//	Scope<Signal>                 1 scope, 2 items
//	InstrumentationScope          1 name, 2 version

// Encoder builds export requests of one signal into reused buffers; it
// belongs to one goroutine.
type Encoder[T any] struct {
	sig      *Signal[T]
	resource []byte // the encoded Resource, once
	scope    []byte // the encoded InstrumentationScope, once
	out      []byte
	items    []byte
	one      []byte
}

// NewEncoder is an Encoder of sig's requests from service (the
// resource's service.name, with attrs).
func NewEncoder[T any](sig *Signal[T], service string, attrs []Attr) *Encoder[T] {
	e := &Encoder[T]{sig: sig}
	e.resource = AppendKV(e.resource, 1, String("service.name", service))
	for _, a := range attrs {
		e.resource = AppendKV(e.resource, 1, a)
	}
	e.scope = AppendString(e.scope, 1, ScopeName)
	return e
}

// Request encodes batch as one export request, releasing each item; the
// result is valid until the next call.
func (e *Encoder[T]) Request(batch []T) []byte {
	e.items = e.items[:0]
	for i := range batch {
		e.one = e.sig.Append(e.one[:0], &batch[i])
		if e.sig.Release != nil {
			e.sig.Release(&batch[i])
		}
		e.items = protowire.AppendTag(e.items, 2, protowire.BytesType)
		e.items = protowire.AppendBytes(e.items, e.one)
	}
	scoped := protowire.SizeTag(1) + protowire.SizeBytes(len(e.scope)) + len(e.items)
	rs := protowire.SizeTag(1) + protowire.SizeBytes(len(e.resource)) + protowire.SizeTag(2) + protowire.SizeBytes(scoped)
	b := e.out[:0]
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(rs))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, e.resource)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(scoped))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, e.scope)
	b = append(b, e.items...)
	e.out = b
	return b
}

// partialSuccess reads an export response: the items the collector
// rejected (every signal's: partial_success = 1 {rejected_<items> = 1,
// error_message = 2}).
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
