package balancer

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// LeastRequest is the "least_request" policy, as Envoy's: the power of two
// choices on active (in-flight) requests. With unequal weights it compares
// weight / (active+1)^bias (Envoy's active_request_bias), so weights still
// shape the load. Weight 0 is never picked when weights differ.
//
// Its known trap, kept on purpose as a baseline: an endpoint that rejects at
// once has few active requests, so it looks the least loaded.
type LeastRequest struct {
	bias   float64
	states stateStore[lrState]
}

var _ Policy = (*LeastRequest)(nil)

type lrState struct {
	active atomic.Int64
}

// NewLeastRequest returns a least_request policy with the given
// active_request_bias (Envoy's default is 1.0; 0 ignores load).
func NewLeastRequest(bias float64) *LeastRequest {
	if bias < 0 || math.IsNaN(bias) {
		bias = 1
	}
	return &LeastRequest{bias: bias}
}

// Name implements Policy.
func (*LeastRequest) Name() string { return "least_request" }

// Build implements Policy.
func (p *LeastRequest) Build(eps []Endpoint) Picker {
	lp := &lrPicker{
		states: p.states.resolve(eps, func(Endpoint) *lrState { return &lrState{} }),
		bias:   p.bias,
	}
	lp.weights = make([]float64, len(eps))
	for i, ep := range eps {
		lp.weights[i] = float64(ep.Weight)
		if ep.Weight != eps[0].Weight {
			lp.weighted = true
		}
		if ep.Weight > 0 {
			lp.live++
		}
	}
	if !lp.weighted {
		lp.live = len(eps) // equal weights (even all 0): plain P2C
	}
	return lp
}

type lrPicker struct {
	states   []*lrState
	weights  []float64
	weighted bool
	live     int // endpoints that may be picked
	bias     float64
}

func (l *lrPicker) Pick() (int, error) {
	n := len(l.states)
	if l.live == 0 {
		return -1, ErrNoEndpoint
	}
	a, b := l.two(n)
	i := a
	if l.weighted {
		if l.score(b) > l.score(a) {
			i = b
		}
	} else if l.states[b].active.Load() < l.states[a].active.Load() {
		i = b
	}
	if l.weighted && l.weights[i] == 0 {
		// Both draws hit weight 0: fall back to a scan (rare, bounded by n).
		i = -1
		for j := range n {
			if l.weights[j] > 0 && (i < 0 || l.score(j) > l.score(i)) {
				i = j
			}
		}
	}
	l.states[i].active.Add(1)
	return i, nil
}

// two draws two distinct indexes (the same one when n == 1).
func (l *lrPicker) two(n int) (int, int) {
	if n == 1 {
		return 0, 0
	}
	a := rand.IntN(n)
	b := rand.IntN(n - 1)
	if b >= a {
		b++
	}
	return a, b
}

func (l *lrPicker) score(i int) float64 {
	act := float64(l.states[i].active.Load()) + 1
	switch l.bias {
	case 0:
		return l.weights[i]
	case 1:
		return l.weights[i] / act
	}
	return l.weights[i] / math.Pow(act, l.bias)
}

func (l *lrPicker) Done(idx int, _ time.Duration, _ Outcome) {
	if idx >= 0 && idx < len(l.states) {
		l.states[idx].active.Add(-1)
	}
}
