package trace

import (
	"encoding/hex"
	"math/rand/v2"
)

// TraceID is a 128-bit trace id; all zeros is invalid.
type TraceID [16]byte

// SpanID is a 64-bit span id; all zeros is invalid.
type SpanID [8]byte

// IsValid reports whether id is not all zeros.
func (id TraceID) IsValid() bool { return id != TraceID{} }

// IsValid reports whether id is not all zeros.
func (id SpanID) IsValid() bool { return id != SpanID{} }

// String is id in lowercase hex (32 digits).
func (id TraceID) String() string { return hex.EncodeToString(id[:]) }

// String is id in lowercase hex (16 digits).
func (id SpanID) String() string { return hex.EncodeToString(id[:]) }

// NewTraceID returns a random valid trace id. math/rand/v2's global source
// is ChaCha8, seeded from the OS, and safe for concurrent use without a lock.
func NewTraceID() TraceID {
	var id TraceID
	for !id.IsValid() {
		putUint64(id[:8], rand.Uint64())
		putUint64(id[8:], rand.Uint64())
	}
	return id
}

// NewSpanID returns a random valid span id.
func NewSpanID() SpanID {
	var id SpanID
	for !id.IsValid() {
		putUint64(id[:], rand.Uint64())
	}
	return id
}

func putUint64(b []byte, v uint64) {
	_ = b[7]
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

func getUint64(b []byte) uint64 {
	_ = b[7]
	var v uint64
	for i := range 8 {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// ParseTraceID reads 32 lowercase hex digits (a trace id as Jaeger and the
// call log show it).
func ParseTraceID(s string) (TraceID, error) {
	var id TraceID
	if len(s) != 32 || !lowerHex([]byte(s)) {
		return id, errorf("trace id %q: want 32 lowercase hex digits", s)
	}
	hex.Decode(id[:], []byte(s))
	if !id.IsValid() {
		return id, errorf("trace id %q is all zeros", s)
	}
	return id, nil
}

// lowerHex reports whether b is all lowercase hex digits.
func lowerHex(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// decodeHex decodes lowercase hex src (len(src) == 2*len(dst)) into dst;
// false if it is not lowercase hex.
func decodeHex(dst, src []byte) bool {
	if len(src) != 2*len(dst) || !lowerHex(src) {
		return false
	}
	for i := range dst {
		dst[i] = unhex(src[2*i])<<4 | unhex(src[2*i+1])
	}
	return true
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

const hexDigits = "0123456789abcdef"

func appendHex(b []byte, src []byte) []byte {
	for _, c := range src {
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	return b
}
