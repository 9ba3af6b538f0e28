package trace

import (
	"errors"
	"fmt"
	"net/http"
)

// Header names, in their canonical case (fasthttp and net/http match
// them in any case).
const (
	HeaderTraceparent  = "Traceparent"
	HeaderTracestate   = "Tracestate"
	HeaderB3           = "B3"
	HeaderB3TraceID    = "X-B3-Traceid"
	HeaderB3SpanID     = "X-B3-Spanid"
	HeaderB3ParentSpan = "X-B3-Parentspanid"
	HeaderB3Sampled    = "X-B3-Sampled"
	HeaderB3Flags      = "X-B3-Flags"
)

// ErrBadHeader is wrapped by every error of Extract: a trace header that
// is present but not valid (the call then starts a new trace, as W3C
// requires).
var ErrBadHeader = errors.New("trace: bad trace context header")

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadHeader}, args...)...)
}

// Format is a set of propagation formats.
type Format uint8

const (
	W3C      Format = 1 << iota // traceparent, tracestate
	B3Multi                     // X-B3-TraceId, X-B3-SpanId, X-B3-ParentSpanId, X-B3-Sampled, X-B3-Flags
	B3Single                    // b3
)

// Getter is what Extract reads: a request's header. Peek returns nil when
// the header is absent; *fasthttp.RequestHeader is one, HTTPHeader adapts
// net/http's.
type Getter interface {
	Peek(key string) []byte
}

// Setter is what Inject writes: a request's header (*fasthttp.RequestHeader
// is one, HTTPHeader adapts net/http's). It must copy value.
type Setter interface {
	SetBytesV(key string, value []byte)
	Del(key string)
}

// HTTPHeader is a net/http header as a Getter and a Setter.
type HTTPHeader http.Header

// Peek returns the header's first value, nil if absent.
func (h HTTPHeader) Peek(key string) []byte {
	if v := http.Header(h).Get(key); v != "" {
		return []byte(v)
	}
	return nil
}

// SetBytesV sets the header to value.
func (h HTTPHeader) SetBytesV(key string, value []byte) { http.Header(h).Set(key, string(value)) }

// Del removes the header.
func (h HTTPHeader) Del(key string) { http.Header(h).Del(key) }

// SpanContext is the trace context a caller sent.
type SpanContext struct {
	TraceID TraceID // zero: the caller sent no trace (at most a decision)
	SpanID  SpanID  // the caller's span, the parent of the callee's
	// Sampled is the caller's decision when Decided.
	Sampled, Decided bool
	Debug            bool // B3 debug ("d", X-B3-Flags: 1): sampled, and kept
	// TraceState is the caller's valid tracestate, aliasing the header
	// (valid until the header changes); nil if absent or invalid.
	TraceState []byte
	// Formats are the formats the caller used, so that the callee's
	// context is written back in them (none: W3C).
	Formats Format
	Short   bool // the B3 trace id had 16 digits: written back so
}

// Extract reads the caller's trace context from h: traceparent (with
// tracestate) first, then b3, then the X-B3-* headers; each format
// present and valid is added to Formats. A header present but invalid is
// ignored and reported in err (wrapping ErrBadHeader); the context returned
// is then that of the formats that were valid, if any.
func Extract(h Getter) (sc SpanContext, err error) {
	var found bool
	if v := h.Peek(HeaderTraceparent); v != nil {
		var e error
		if sc, e = ParseTraceparent(v); e != nil {
			err = e
			sc = SpanContext{}
		} else {
			found = true
			sc.Formats = W3C
			if ts := h.Peek(HeaderTracestate); ts != nil {
				if e := ValidTracestate(ts); e != nil {
					err = e
				} else {
					sc.TraceState = ts
				}
			}
		}
	}
	if v := h.Peek(HeaderB3); v != nil {
		b3, e := ParseB3(v)
		switch {
		case e != nil:
			err = errors.Join(err, e)
		case !found:
			sc, found = b3, true
		default:
			sc.Formats |= B3Single
		}
	}
	if b3, ok, e := parseB3Multi(h); e != nil {
		err = errors.Join(err, e)
	} else if ok && !found {
		sc = b3
	} else if ok {
		sc.Formats |= B3Multi
	}
	return sc, err
}

// trim drops optional white space (SP, HTAB) around a header value.
func trim(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// ParseTraceparent reads a W3C traceparent: version-traceid-parentid-flags,
// lowercase hex. Version ff is invalid; version 00 is exactly 55
// characters; a later version may append fields after a '-', which are
// ignored (W3C Trace Context, "Versioning of traceparent").
func ParseTraceparent(v []byte) (SpanContext, error) {
	v = trim(v)
	var sc SpanContext
	if len(v) < 55 {
		return sc, errorf("traceparent %q: want version-traceid-parentid-flags, 55 characters", v)
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return sc, errorf("traceparent %q: want '-' between its four fields", v)
	}
	var ver [1]byte
	if !decodeHex(ver[:], v[:2]) || ver[0] == 0xff {
		return sc, errorf("traceparent %q: version %q is not 00..fe in lowercase hex", v, v[:2])
	}
	if len(v) > 55 && (ver[0] == 0 || v[55] != '-') {
		return sc, errorf("traceparent %q: version %s is 55 characters, not %d", v, v[:2], len(v))
	}
	if !decodeHex(sc.TraceID[:], v[3:35]) || !sc.TraceID.IsValid() {
		return sc, errorf("traceparent %q: trace id is not 32 lowercase hex digits, not all zero", v)
	}
	if !decodeHex(sc.SpanID[:], v[36:52]) || !sc.SpanID.IsValid() {
		return sc, errorf("traceparent %q: parent id is not 16 lowercase hex digits, not all zero", v)
	}
	var flags [1]byte
	if !decodeHex(flags[:], v[53:55]) {
		return sc, errorf("traceparent %q: flags %q are not 2 lowercase hex digits", v, v[53:55])
	}
	sc.Sampled, sc.Decided = flags[0]&1 != 0, true
	return sc, nil
}

// maxTracestateMembers is W3C's limit on tracestate's list members.
const maxTracestateMembers = 32

// ValidTracestate checks a W3C tracestate: at most 32 comma-separated
// key=value members (empty ones allowed), keys unique, each key simple
// (lcalpha then up to 255 of lcalpha, digits, _-*/) or tenant@system,
// each value 0-256 printable ASCII characters but ',' and '=' not ending
// in a space.
func ValidTracestate(v []byte) error {
	var keys [maxTracestateMembers][]byte
	n := 0
	for rest := v; ; {
		var m []byte
		i := indexByte(rest, ',')
		if i < 0 {
			m, rest = rest, nil
		} else {
			m, rest = rest[:i], rest[i+1:]
		}
		if m = trim(m); len(m) > 0 {
			eq := indexByte(m, '=')
			if eq < 0 {
				return errorf("tracestate %q: member %q is not key=value", v, m)
			}
			key, val := m[:eq], m[eq+1:]
			if !validTraceStateKey(key) {
				return errorf("tracestate %q: key %q is not valid", v, key)
			}
			if !validTraceStateValue(val) {
				return errorf("tracestate %q: value of %q is not valid", v, key)
			}
			if n == maxTracestateMembers {
				return errorf("tracestate %q: more than %d members", v, maxTracestateMembers)
			}
			for _, k := range keys[:n] {
				if string(k) == string(key) {
					return errorf("tracestate %q: key %q given twice", v, key)
				}
			}
			keys[n] = key
			n++
		}
		if i < 0 {
			return nil
		}
	}
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func keyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*' || c == '/'
}

func validTraceStateKey(k []byte) bool {
	at := indexByte(k, '@')
	if at < 0 {
		if len(k) == 0 || len(k) > 256 || k[0] < 'a' || k[0] > 'z' {
			return false
		}
		for _, c := range k {
			if !keyChar(c) {
				return false
			}
		}
		return true
	}
	tenant, system := k[:at], k[at+1:]
	if len(tenant) == 0 || len(tenant) > 241 || !(tenant[0] >= 'a' && tenant[0] <= 'z' || tenant[0] >= '0' && tenant[0] <= '9') {
		return false
	}
	if len(system) == 0 || len(system) > 14 || system[0] < 'a' || system[0] > 'z' {
		return false
	}
	for _, c := range tenant {
		if !keyChar(c) {
			return false
		}
	}
	for _, c := range system {
		if !keyChar(c) {
			return false
		}
	}
	return true
}

func validTraceStateValue(v []byte) bool {
	if len(v) == 0 || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for _, c := range v {
		if c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// parseB3TraceID reads a B3 trace id: 16 or 32 lowercase hex digits, not
// all zero; short says it had 16.
func parseB3TraceID(v []byte) (id TraceID, short, ok bool) {
	switch len(v) {
	case 16:
		ok = decodeHex(id[8:], v)
		short = true
	case 32:
		ok = decodeHex(id[:], v)
	}
	return id, short, ok && id.IsValid()
}

func parseB3SpanID(v []byte) (id SpanID, ok bool) {
	ok = decodeHex(id[:], v)
	return id, ok && id.IsValid()
}

// ParseB3 reads the single b3 header: traceid-spanid[-sampling[-parentspanid]],
// or a sampling state alone (0, 1 or d).
func ParseB3(v []byte) (SpanContext, error) {
	v = trim(v)
	sc := SpanContext{Formats: B3Single}
	if len(v) == 1 {
		if !sc.setB3State(v[0]) {
			return SpanContext{}, errorf("b3 %q: sampling state is not 0, 1 or d", v)
		}
		return sc, nil
	}
	var parts [5][]byte
	n := 0
	for rest := v; n < len(parts); {
		i := indexByte(rest, '-')
		if i < 0 {
			parts[n] = rest
			n++
			break
		}
		parts[n], rest = rest[:i], rest[i+1:]
		n++
	}
	if n < 2 || n > 4 {
		return SpanContext{}, errorf("b3 %q: want traceid-spanid[-sampling[-parentspanid]]", v)
	}
	var ok bool
	if sc.TraceID, sc.Short, ok = parseB3TraceID(parts[0]); !ok {
		return SpanContext{}, errorf("b3 %q: trace id is not 16 or 32 lowercase hex digits, not all zero", v)
	}
	if sc.SpanID, ok = parseB3SpanID(parts[1]); !ok {
		return SpanContext{}, errorf("b3 %q: span id is not 16 lowercase hex digits, not all zero", v)
	}
	if n >= 3 && (len(parts[2]) != 1 || !sc.setB3State(parts[2][0])) {
		return SpanContext{}, errorf("b3 %q: sampling state is not 0, 1 or d", v)
	}
	if n == 4 {
		if _, ok := parseB3SpanID(parts[3]); !ok {
			return SpanContext{}, errorf("b3 %q: parent span id is not 16 lowercase hex digits, not all zero", v)
		}
	}
	return sc, nil
}

func (sc *SpanContext) setB3State(c byte) bool {
	switch c {
	case '0':
		sc.Decided = true
	case '1':
		sc.Sampled, sc.Decided = true, true
	case 'd':
		sc.Sampled, sc.Decided, sc.Debug = true, true, true
	default:
		return false
	}
	return true
}

// parseB3Multi reads the X-B3-* headers; false if none is present.
func parseB3Multi(h Getter) (SpanContext, bool, error) {
	tid, sid := h.Peek(HeaderB3TraceID), h.Peek(HeaderB3SpanID)
	parent, sampled, flags := h.Peek(HeaderB3ParentSpan), h.Peek(HeaderB3Sampled), h.Peek(HeaderB3Flags)
	if tid == nil && sid == nil && parent == nil && sampled == nil && flags == nil {
		return SpanContext{}, false, nil
	}
	sc := SpanContext{Formats: B3Multi}
	if sampled != nil {
		switch s := string(trim(sampled)); s {
		case "1", "true":
			sc.Sampled, sc.Decided = true, true
		case "0", "false":
			sc.Decided = true
		default:
			return SpanContext{}, false, errorf("X-B3-Sampled %q: want 1 or 0", sampled)
		}
	}
	if flags != nil {
		switch string(trim(flags)) {
		case "1":
			sc.Sampled, sc.Decided, sc.Debug = true, true, true
		case "0":
		default:
			return SpanContext{}, false, errorf("X-B3-Flags %q: want 1 (debug) or 0", flags)
		}
	}
	if tid == nil && sid == nil && parent == nil {
		return sc, true, nil // a decision alone
	}
	var ok bool
	if sc.TraceID, sc.Short, ok = parseB3TraceID(trim(tid)); !ok {
		return SpanContext{}, false, errorf("X-B3-TraceId %q: want 16 or 32 lowercase hex digits, not all zero", tid)
	}
	if sc.SpanID, ok = parseB3SpanID(trim(sid)); !ok {
		return SpanContext{}, false, errorf("X-B3-SpanId %q: want 16 lowercase hex digits, not all zero", sid)
	}
	if parent != nil {
		if _, ok := parseB3SpanID(trim(parent)); !ok {
			return SpanContext{}, false, errorf("X-B3-ParentSpanId %q: want 16 lowercase hex digits, not all zero", parent)
		}
	}
	return sc, true, nil
}

// Outgoing is the context a callee is sent: the trace, the span that
// calls it (Span) and that span's parent (Parent, for B3; zero: none).
type Outgoing struct {
	TraceID      TraceID
	Span, Parent SpanID
	Sampled      bool
	Debug        bool
	Formats      Format // none: W3C
	Short        bool   // write B3 trace ids in 16 digits
}

// Inject writes o into h in o's formats (W3C when none); tracestate is
// left as the caller sent it (a proxy does not change it).
func Inject(h Setter, o *Outgoing) {
	var buf [72]byte
	f := o.Formats
	if f == 0 {
		f = W3C
	}
	if f&W3C != 0 {
		h.SetBytesV(HeaderTraceparent, AppendTraceparent(buf[:0], o))
	}
	if f&B3Single != 0 {
		h.SetBytesV(HeaderB3, AppendB3(buf[:0], o))
	}
	if f&B3Multi != 0 {
		h.SetBytesV(HeaderB3TraceID, o.appendB3TraceID(buf[:0]))
		h.SetBytesV(HeaderB3SpanID, appendHex(buf[:0], o.Span[:]))
		if o.Parent.IsValid() {
			h.SetBytesV(HeaderB3ParentSpan, appendHex(buf[:0], o.Parent[:]))
		} else {
			h.Del(HeaderB3ParentSpan)
		}
		if o.Debug {
			h.SetBytesV(HeaderB3Flags, append(buf[:0], '1'))
			h.Del(HeaderB3Sampled) // debug implies sampled (B3 spec)
		} else {
			h.Del(HeaderB3Flags)
			h.SetBytesV(HeaderB3Sampled, append(buf[:0], "01"[b2i(o.Sampled)]))
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// AppendTraceparent appends o's traceparent (version 00).
func AppendTraceparent(b []byte, o *Outgoing) []byte {
	b = append(b, "00-"...)
	b = appendHex(b, o.TraceID[:])
	b = append(b, '-')
	b = appendHex(b, o.Span[:])
	if o.Sampled || o.Debug {
		return append(b, "-01"...)
	}
	return append(b, "-00"...)
}

func (o *Outgoing) appendB3TraceID(b []byte) []byte {
	if o.Short && [8]byte(o.TraceID[:8]) == [8]byte{} {
		return appendHex(b, o.TraceID[8:])
	}
	return appendHex(b, o.TraceID[:])
}

// AppendB3 appends o's single b3 header value.
func AppendB3(b []byte, o *Outgoing) []byte {
	b = o.appendB3TraceID(b)
	b = append(b, '-')
	b = appendHex(b, o.Span[:])
	switch {
	case o.Debug:
		b = append(b, "-d"...)
	case o.Sampled:
		b = append(b, "-1"...)
	default:
		b = append(b, "-0"...)
	}
	if o.Parent.IsValid() {
		b = append(b, '-')
		b = appendHex(b, o.Parent[:])
	}
	return b
}
