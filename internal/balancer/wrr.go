package balancer

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// WeightedRoundRobin is the "weighted_round_robin" policy: each endpoint gets
// a share of calls proportional to its Weight, spread smoothly (no bursts of
// one endpoint). Weight 0 is never picked.
//
// It is the static stride scheduler of grpc-go's weighted_round_robin (the
// lock-free equivalent of Envoy's EDF scheduler): weights are scaled so the
// largest is maxStride; a shared counter walks the endpoints and endpoint i
// is taken in generation g when (w_i*g + offset_i) mod maxStride >= maxStride
// - w_i, which happens w_i/maxStride of the time, evenly spaced. The endpoint
// with the largest weight is always taken, so a Pick loops at most n times.
type WeightedRoundRobin struct {
	next atomic.Uint64
}

var _ Policy = (*WeightedRoundRobin)(nil)

// maxStride is the scaled weight of the heaviest endpoint.
const maxStride = 1<<16 - 1

// NewWeightedRoundRobin returns a weighted_round_robin policy.
func NewWeightedRoundRobin() *WeightedRoundRobin {
	p := &WeightedRoundRobin{}
	p.next.Store(rand.Uint64N(1 << 32))
	return p
}

// Name implements Policy.
func (*WeightedRoundRobin) Name() string { return "weighted_round_robin" }

// Build implements Policy.
func (p *WeightedRoundRobin) Build(eps []Endpoint) Picker {
	var maxW uint32
	for _, ep := range eps {
		maxW = max(maxW, ep.Weight)
	}
	w := &wrrPicker{next: &p.next, n: uint64(len(eps))}
	if maxW == 0 {
		w.n = 0
		return w
	}
	w.scaled = make([]uint64, len(eps))
	w.offset = make([]uint64, len(eps))
	for i, ep := range eps {
		s := uint64(ep.Weight) * maxStride / uint64(maxW)
		if s == 0 && ep.Weight > 0 {
			s = 1 // a tiny weight still gets picked, rarely
		}
		w.scaled[i] = s
		// Spread the endpoints' turns so equal weights do not all fire in
		// the same generation (grpc-go uses the same half-stride offset).
		w.offset[i] = uint64(i) * (maxStride / 2)
		if ep.Weight == maxW && w.scaled[w.heaviest] != maxStride {
			w.heaviest = i
		}
	}
	return w
}

type wrrPicker struct {
	next     *atomic.Uint64
	n        uint64
	scaled   []uint64
	offset   []uint64
	heaviest int
}

func (w *wrrPicker) Pick() (int, error) {
	if w.n == 0 {
		return -1, ErrNoEndpoint
	}
	// The heaviest endpoint accepts every generation, so n+1 of our own
	// increments suffice; concurrent pickers may take the accepting turns,
	// hence the slack.
	for range 4 * (w.n + 1) {
		seq := w.next.Add(1)
		i := seq % w.n
		gen := seq / w.n
		s := w.scaled[i]
		if (s*gen+w.offset[i])%maxStride >= maxStride-s {
			return int(i), nil
		}
	}
	// Only under heavy contention: the heaviest endpoint is always correct.
	return w.heaviest, nil
}

func (*wrrPicker) Done(int, time.Duration, Outcome) {}
