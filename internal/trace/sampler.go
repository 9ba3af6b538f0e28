package trace

import (
	"fmt"
	"math"
)

// Sampler decides which traces are recorded. It is immutable, safe for
// concurrent use; its zero value samples nothing.
type Sampler struct {
	// threshold: trace ids whose last 8 bytes (shifted right by one)
	// are below it are sampled; every one when all.
	threshold uint64
	all       bool
	rate      float64
	// KeepErrors records the spans of failed calls (5xx, no answer) even
	// when the trace was not sampled; their context still goes upstream
	// unsampled, so a trace kept so holds the gateway's spans only.
	KeepErrors bool
}

// NewSampler samples rate (0 to 1) of the traces the caller did not
// decide on.
func NewSampler(rate float64, keepErrors bool) (Sampler, error) {
	if math.IsNaN(rate) || rate < 0 || rate > 1 {
		return Sampler{}, fmt.Errorf("trace: sampling rate %v: want 0 to 1", rate)
	}
	return Sampler{threshold: uint64(rate * (1 << 63)), all: rate == 1, rate: rate, KeepErrors: keepErrors}, nil
}

// Rate is the sampler's rate.
func (s Sampler) Rate() float64 { return s.rate }

// Sample decides on the trace of a call whose caller sent sc (its trace
// id is id): the caller's decision when it made one, else by rate, on the
// trace id so that every hop of a trace decides alike (OpenTelemetry's
// TraceIDRatioBased).
func (s Sampler) Sample(sc *SpanContext, id TraceID) bool {
	if sc.Decided {
		return sc.Sampled
	}
	return s.all || getUint64(id[8:])>>1 < s.threshold
}
