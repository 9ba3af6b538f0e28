package trace

import "github.com/sextant-mesh/sextant/internal/otlp"

// Kind is a span's kind, in OTLP's numbering.
type Kind uint8

const (
	KindInternal Kind = 1
	KindServer   Kind = 2 // the gateway's span of a call it received
	KindClient   Kind = 3 // the gateway's span of one try upstream
)

// Attr is one span attribute (otlp.Attr).
type Attr = otlp.Attr

// String is a string attribute.
func String(k, v string) Attr { return otlp.String(k, v) }

// Int is an integer attribute.
func Int(k string, v int64) Attr { return otlp.Int(k, v) }

// fixedAttrs is how many attributes a Span holds without allocating: the
// gateway's spans have up to 12.
const fixedAttrs = 12

// Span is one finished span, as the exporter sends it. It is copied by
// value into the exporter's queue: its first attributes live in it, so
// that a span of the gateway's allocates nothing for them.
type Span struct {
	TraceID      TraceID
	SpanID       SpanID
	Parent       SpanID // zero: a root span
	TraceState   string
	Name         string
	Kind         Kind
	Start, End   int64 // unix nanoseconds
	Error        bool  // the span's status is ERROR (Envoy's error=true)
	ErrorMessage string
	fixed        [fixedAttrs]Attr
	nFixed       uint8
	more         []Attr // beyond fixed
}

// Add adds an attribute.
func (s *Span) Add(a Attr) {
	if s.nFixed < fixedAttrs {
		s.fixed[s.nFixed] = a
		s.nFixed++
		return
	}
	s.more = append(s.more, a)
}

// Attrs returns the span's attributes, in the order added.
func (s *Span) Attrs() []Attr {
	return append(s.fixed[:s.nFixed:s.nFixed], s.more...)
}

// Attr returns the attribute named k; false if there is none.
func (s *Span) Attr(k string) (Attr, bool) {
	for _, a := range s.fixed[:s.nFixed] {
		if a.Key == k {
			return a, true
		}
	}
	for _, a := range s.more {
		if a.Key == k {
			return a, true
		}
	}
	return Attr{}, false
}
