package balancer

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// adaptive is the "adaptive" policy, Sextant's default, for endpoints whose
// capacity changes and which reject at once when full.
//
// For each endpoint it estimates two bounds from the calls it sees:
//
//   - limit: how many calls the endpoint serves at once (its concurrency
//     limit). When a call completes, its rank is 1 + the number of calls to
//     the same endpoint that were sent before it and are still in flight.
//     An endpoint that admits calls in order (a FIFO permit queue, a thread
//     pool's queue) only completes calls it has started, so a rank never
//     exceeds its limit; when calls queue, ranks spread uniformly up to it.
//     The estimate is the second-largest rank of the last one to two
//     windows, so it falls within two windows after capacity falls, and it
//     rises as soon as calls beyond the old estimate complete.
//   - threads: how many calls it holds before rejecting. A rejection of a
//     call with rank r says r-1 calls filled it (never below the limit, nor
//     below half the previous bound at once). It is probed upwards again
//     (+1/8 per window without rejections while it binds).
//
// A rejection or a fast failure is never taken as a latency sample: it lowers
// threads, so the trap of least-request (a full endpoint rejects
// instantly, looks fast, attracts more calls) cannot happen.
//
// Pick sends a call where it has the most spare permits or, when none has,
// where its expected queueing is least (see score). Endpoints at their thread bound are skipped; when all are, the call
// is shed at the caller (ErrShed) instead of being rejected remotely. Up to
// scanAll endpoints are all scored; beyond, two random ones (P2C).
type adaptive struct {
	nanos  func() int64 // monotonic clock; Pick reads it once
	window int64        // nanoseconds per rank bucket
	states stateStore[adaptiveState]
}

var _ Policy = (*adaptive)(nil)

const (
	// scanAll: sets up to this size are scored in full; larger ones by P2C.
	scanAll = 8
	// ringSize bounds the calls in flight per endpoint whose rank is known.
	ringSize = 1024
	// defaultWindow is a rank bucket; the limit follows a fall in capacity
	// within two buckets.
	defaultWindow = 200 * time.Millisecond
	// unknownThreads means no rejection seen yet.
	unknownThreads = math.MaxInt32
	// startLimit is the limit before any call completes.
	startLimit = 1
	// startLatency scores endpoints before any latency is known.
	startLatency = int64(time.Millisecond)
	doneBit      = uint64(1) << 63
)

type adaptiveState struct {
	inflight atomic.Int64
	limit    atomic.Int64
	threads  atomic.Int64
	latency  atomic.Int64 // EWMA of successful calls' latency, ns

	head atomic.Uint64 // sequence of the next call sent
	ring []slot        // send times of calls in flight, by sequence

	mu sync.Mutex // guards the fields below; taken by Done only
	// tail is the oldest sequence that may still be in flight.
	tail uint64
	// cur and prev hold the two largest ranks of the current and the
	// previous window; curStart is when cur began (unix ns).
	cur, prev  [2]int64
	curStart   int64
	lastReject int64
}

// slot is one call's send time; seq is its sequence+1 while in flight and
// gains doneBit when it completes, so a reader can tell laps apart.
type slot struct {
	seq atomic.Uint64
	t   atomic.Int64
}

func newAdaptive(nanos func() int64) *adaptive {
	return &adaptive{nanos: nanos, window: int64(defaultWindow)}
}

// Name implements Policy.
func (*adaptive) Name() string { return "adaptive" }

// Build implements Policy.
func (p *adaptive) Build(eps []Endpoint) Picker {
	return &adaptivePicker{p: p, states: p.states.resolve(eps, func(Endpoint) *adaptiveState {
		st := &adaptiveState{ring: make([]slot, ringSize)}
		st.limit.Store(startLimit)
		st.threads.Store(unknownThreads)
		return st
	})}
}

type adaptivePicker struct {
	p      *adaptive
	states []*adaptiveState
}

var _ Picker = (*adaptivePicker)(nil)

func (a *adaptivePicker) Pick() (int, error) {
	n := len(a.states)
	if n == 0 {
		return -1, ErrNoEndpoint
	}
	best, bestScore := -1, math.Inf(1)
	if n <= scanAll {
		// A random start breaks ties fairly without a second pass.
		off := rand.IntN(n)
		for k := range n {
			i := off + k
			if i >= n {
				i -= n
			}
			if s, ok := a.score(i); ok && s < bestScore {
				best, bestScore = i, s
			}
		}
	} else {
		// One draw for both choices: x and y are two independent
		// multiply-shift reductions of the halves of one random word.
		r := rand.Uint64()
		x := int((r >> 32) * uint64(n) >> 32)
		y := int((r & 0xffffffff) * uint64(n-1) >> 32)
		if y >= x {
			y++
		}
		if s, ok := a.score(x); ok {
			best, bestScore = x, s
		}
		if s, ok := a.score(y); ok && s < bestScore {
			best = y
		}
	}
	if best < 0 {
		return -1, ErrShed
	}
	st := a.states[best]
	st.inflight.Add(1)
	seq := st.head.Add(1) - 1
	sl := &st.ring[seq%ringSize]
	sl.t.Store(a.p.nanos())
	sl.seq.Store(seq + 1)
	return best, nil
}

// score ranks endpoint i for a new call, lower is better; ok is false when
// i is at its thread bound. The target is limit+1: one call beyond the
// estimate probes whether the limit grew (its rank shows it) and keeps the
// estimate from drifting down while an endpoint is not full. Below the
// target the score is minus the spare permits, so spare is shared out evenly
// (every endpoint keeps its probe); above it, the expected wait in the queue
// the call would join: (inflight+1-target) x latency / target.
func (a *adaptivePicker) score(i int) (float64, bool) {
	st := a.states[i]
	in := st.inflight.Load()
	if in >= st.threads.Load() {
		return 0, false
	}
	tgt := st.limit.Load() + 1
	if in+1 <= tgt {
		return float64(in - tgt), true
	}
	lat := st.latency.Load()
	if lat == 0 {
		lat = startLatency
	}
	return float64(in+1-tgt) * float64(lat) / float64(tgt), true
}

func (a *adaptivePicker) Done(idx int, latency time.Duration, outcome Outcome) {
	if idx < 0 || idx >= len(a.states) {
		return
	}
	st := a.states[idx]
	now := a.p.nanos()
	st.mu.Lock()
	rank := st.complete(now - int64(latency))
	st.inflight.Add(-1)
	st.roll(now, a.p.window)
	switch outcome {
	case Success:
		if rank > 0 {
			st.observeRank(rank)
		}
		st.observeLatency(int64(latency))
	case Rejected:
		// rank-1 calls were in flight when it was refused: that filled it.
		// An endpoint holds at least the calls it serves at once, and a
		// late Done (a starved caller) can match an old call and report a
		// tiny rank, so the bound never drops below the limit estimate nor
		// below half its previous value in one step.
		if rank > 0 {
			t := max(rank-1, st.limit.Load(), 1)
			if old := st.threads.Load(); old != unknownThreads {
				t = max(t, old/2)
			}
			st.threads.Store(t)
		}
		st.lastReject = now
	case Timeout:
		// The endpoint held the call past its deadline: it queues more than
		// its limit suggests, so back off multiplicatively.
		st.limit.Store(max(st.limit.Load()*9/10, 1))
	}
	st.mu.Unlock()
}

// complete finds the call that was sent at sent (the newest call in flight
// sent no later), marks it done and returns its rank; 0 if it is unknown.
// Called with mu held.
func (st *adaptiveState) complete(sent int64) int64 {
	head := st.head.Load()
	if head-st.tail > ringSize {
		st.tail = head - ringSize
	}
	found, oldest := uint64(0), uint64(0)
	ok, have := false, false
	for p := head; p > st.tail; {
		p--
		sl := &st.ring[p%ringSize]
		if sl.seq.Load() != p+1 {
			continue // done, or sent but not yet recorded
		}
		oldest, have = p, true
		t := sl.t.Load()
		if sl.seq.Load() != p+1 || t > sent {
			continue
		}
		if sl.seq.CompareAndSwap(p+1, (p+1)|doneBit) {
			found, ok = p, true
			break
		}
	}
	if !ok {
		// The caller's latency reaches back before every call in flight
		// (it timed more than Pick to Done): the oldest is the best guess,
		// and releasing some slot keeps the ring from filling.
		if !have || !st.ring[oldest%ringSize].seq.CompareAndSwap(oldest+1, (oldest+1)|doneBit) {
			return 0
		}
		found = oldest
	}
	rank := int64(1)
	for p := st.tail; p < found; p++ {
		if st.ring[p%ringSize].seq.Load() == p+1 {
			rank++
		}
	}
	for st.tail < head && st.ring[st.tail%ringSize].seq.Load() == (st.tail+1)|doneBit {
		st.tail++
	}
	return rank
}

// roll starts a new rank window when the current one is over, and probes
// the thread bound upwards after a window without rejections.
func (st *adaptiveState) roll(now, window int64) {
	if now-st.curStart < window {
		return
	}
	if now-st.curStart < 2*window {
		st.prev = st.cur
	} else {
		st.prev = [2]int64{} // idle for a while: forget
	}
	st.cur = [2]int64{}
	st.curStart = now
	// Probe the thread bound upwards only while it is what holds calls
	// back, by an eighth per quiet window: a bound learned from a bad
	// sample recovers in a second or two, not one call per window.
	if t := st.threads.Load(); t != unknownThreads && now-st.lastReject > window && st.inflight.Load() >= t-1 {
		st.threads.Store(t + max(1, t/8))
	}
}

// observeRank records a success's rank and updates the limit estimate: the
// second-largest rank over the current and previous windows (one outlying
// rank, e.g. from a mismatched send time, does not raise it).
func (st *adaptiveState) observeRank(rank int64) {
	switch {
	case rank > st.cur[0]:
		st.cur[1], st.cur[0] = st.cur[0], rank
	case rank > st.cur[1]:
		st.cur[1] = rank
	}
	a, b := st.cur[0], st.cur[1]
	for _, r := range st.prev {
		switch {
		case r > a:
			a, b = r, a
		case r > b:
			b = r
		}
	}
	lim := max(b, 1)
	if t := st.threads.Load(); lim > t {
		lim = t
	}
	st.limit.Store(lim)
}

// observeLatency folds a success's latency into the EWMA (weight 1/16).
func (st *adaptiveState) observeLatency(ns int64) {
	old := st.latency.Load()
	if old == 0 {
		st.latency.Store(max(ns, 1))
		return
	}
	st.latency.Store(max(old+(ns-old)/16, 1))
}
