package balancer

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// peakEWMA is the "peak_ewma" policy, as Finagle's: the power of two choices
// on cost = peak-sensitive EWMA of latency x (pending + 1). The EWMA jumps to
// any latency above it and decays towards lower ones with time constant
// decay, so a slow endpoint is avoided at once and forgiven gradually. An
// endpoint with no latency yet but calls pending costs a large penalty.
//
// Like Finagle it learns from every outcome's latency, so an endpoint that
// rejects at once looks fast: the adaptive policy exists for that case.
type peakEWMA struct {
	decay float64 // nanoseconds
	nanos func() int64
	// seen is the clock as of the latest Done: Pick decays costs to it
	// instead of reading the clock (a clock read costs more than the rest
	// of Pick on a VM), which is precise enough for a 10s decay.
	seen   atomic.Int64
	states stateStore[ewmaState]
}

var _ Policy = (*peakEWMA)(nil)

type ewmaState struct {
	pending atomic.Int64
	cost    atomic.Uint64 // float64 bits, nanoseconds
	stamp   atomic.Int64  // unix nanoseconds of the last update
	mu      sync.Mutex    // serialises Done's read-modify-write of cost
}

// penalty is Finagle's cost for an endpoint with calls pending and no
// latency observed yet (Long.MaxValue >> 16, in nanoseconds).
const penalty = float64(math.MaxInt64 >> 16)

func newPeakEWMA(decay time.Duration, nanos func() int64) *peakEWMA {
	if decay <= 0 {
		decay = 10 * time.Second
	}
	p := &peakEWMA{decay: float64(decay), nanos: nanos}
	p.seen.Store(nanos())
	return p
}

// Name implements Policy.
func (*peakEWMA) Name() string { return "peak_ewma" }

// Build implements Policy.
func (p *peakEWMA) Build(eps []Endpoint) Picker {
	return &ewmaPicker{p: p, states: p.states.resolve(eps, func(Endpoint) *ewmaState { return &ewmaState{} })}
}

type ewmaPicker struct {
	p      *peakEWMA
	states []*ewmaState
}

func (e *ewmaPicker) Pick() (int, error) {
	n := len(e.states)
	if n == 0 {
		return -1, ErrNoEndpoint
	}
	i := 0
	if n > 1 {
		a := rand.IntN(n)
		b := rand.IntN(n - 1)
		if b >= a {
			b++
		}
		now := e.p.seen.Load()
		i = a
		if e.load(b, now) < e.load(a, now) {
			i = b
		}
	}
	e.states[i].pending.Add(1)
	return i, nil
}

// load is Finagle's cost(): the EWMA decayed to now (as if a zero latency
// were observed, without storing it) times pending+1.
func (e *ewmaPicker) load(i int, now int64) float64 {
	st := e.states[i]
	pending := float64(st.pending.Load())
	c := math.Float64frombits(st.cost.Load())
	if c == 0 {
		if pending != 0 {
			return penalty + pending
		}
		return 0
	}
	if td := now - st.stamp.Load(); td > 0 {
		c *= math.Exp(-float64(td) / e.p.decay)
	}
	return c * (pending + 1)
}

func (e *ewmaPicker) Done(idx int, latency time.Duration, outcome Outcome) {
	if idx < 0 || idx >= len(e.states) {
		return
	}
	st := e.states[idx]
	st.pending.Add(-1)
	if outcome == Canceled {
		return
	}
	rtt := float64(latency)
	now := e.p.nanos()
	if now > e.p.seen.Load() {
		e.p.seen.Store(now)
	}
	st.mu.Lock()
	c := math.Float64frombits(st.cost.Load())
	if rtt > c {
		c = rtt
	} else {
		w := math.Exp(-float64(max(now-st.stamp.Load(), 0)) / e.p.decay)
		c = c*w + rtt*(1-w)
	}
	st.cost.Store(math.Float64bits(c))
	st.stamp.Store(now)
	st.mu.Unlock()
}
