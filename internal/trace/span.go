package trace

// Kind is a span's kind, in OTLP's numbering.
type Kind uint8

const (
	KindInternal Kind = 1
	KindServer   Kind = 2 // the gateway's span of a call it received
	KindClient   Kind = 3 // the gateway's span of one try upstream
)

// Attr is one span attribute: a string, or an integer when IsInt.
type Attr struct {
	Key   string
	Str   string
	Int   int64
	IsInt bool
}

// String is a string attribute.
func String(k, v string) Attr { return Attr{Key: k, Str: v} }

// Int is an integer attribute.
func Int(k string, v int64) Attr { return Attr{Key: k, Int: v, IsInt: true} }

// Span is one finished span, as the exporter sends it.
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
	Attrs        []Attr
}
