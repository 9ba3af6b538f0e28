package callstore

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"

	"github.com/sextant-mesh/sextant/internal/callstore"
)

const (
	demoSpan   = 100_000
	randomAMax = 1 << 48
)

// workload maps a counter to its record and draws query windows.
type workload struct {
	random   bool
	counters int64
}

func (w workload) a(c int64) int64 {
	if !w.random {
		return c
	}
	return int64(splitmix(uint64(c)) & (randomAMax - 1))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func body(c, a int64) [callstore.BodySize]byte {
	var b [callstore.BodySize]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(c))
	binary.LittleEndian.PutUint64(b[8:], uint64(a))
	binary.LittleEndian.PutUint64(b[16:], splitmix(uint64(c)^0xabc))
	binary.LittleEndian.PutUint64(b[24:], uint64(c)*3)
	b[32], b[33] = byte(c), byte(a)
	return b
}

type window struct{ aMin, aMax, tMin, tMax int64 }

// query draws a window. demo: the race tester's (aMin random, aMax = aMin +
// span, tMin in [aMin, aMax), tMax = tMin + random(span)); random: t window
// as in demo, a window [aMin, aMin + random(2^47)] in [0, 2^48).
func (w workload) query(r *rand.Rand) window {
	if !w.random {
		aMin := r.Int64N(w.counters)
		tMin := aMin + r.Int64N(demoSpan)
		return window{aMin, aMin + demoSpan, tMin, tMin + r.Int64N(demoSpan)}
	}
	tMin := r.Int64N(w.counters)
	aMin := r.Int64N(randomAMax)
	return window{aMin, aMin + r.Int64N(randomAMax/2), tMin, tMin + r.Int64N(demoSpan)}
}

// expect returns how many records match q and the integer part of their
// mean a (a >= 0 here; the sum can pass 2^63, so it is kept in 128 bits).
func (w workload) expect(q window) (n, mean int64) {
	var sHi, sLo uint64
	lo, hi := q.tMin, min(q.tMax, w.counters-1)
	if !w.random {
		lo, hi = max(lo, q.aMin), min(hi, q.aMax)
	}
	for c := lo; c <= hi; c++ {
		a := w.a(c)
		if a < q.aMin || a > q.aMax {
			continue
		}
		k := int64(1 + (1 - c&1)) // even counters twice
		n += k
		for range k {
			var carry uint64
			sLo, carry = bits.Add64(sLo, uint64(a), 0)
			sHi += carry
		}
	}
	if n == 0 {
		return 0, 0
	}
	q1, r := bits.Div64(0, sHi, uint64(n))
	q0, _ := bits.Div64(r, sLo, uint64(n))
	_ = q1 // zero: a mean of int64s fits in 64 bits
	return n, int64(q0)
}

// checkMessages checks a Messages answer record by record: in the window,
// a and body derived from t, sorted by t, each even counter twice.
func checkMessages(wl workload, q window, got []callstore.Message) bool {
	prev := int64(-1)
	seen := 0
	for i := range got {
		m := &got[i]
		if m.T < q.tMin || m.T > q.tMax || m.A < q.aMin || m.A > q.aMax || m.A != wl.a(m.T) ||
			binary.LittleEndian.Uint64(m.Body[:]) != uint64(m.T) || m.Body[33] != byte(m.A) {
			return false
		}
		// The whole body of every 16th record (the check would otherwise
		// cost as much as the query it checks).
		if i%16 == 0 && m.Body != body(m.T, m.A) {
			return false
		}
		switch {
		case m.T < prev:
			return false
		case m.T == prev:
			seen++
		default:
			seen = 1
		}
		if seen > 1+int(1-m.T&1) {
			return false
		}
		prev = m.T
	}
	return true
}
