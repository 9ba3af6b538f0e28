package acl

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Rate is a token bucket: PerSecond requests on average, Burst at once.
// PerSecond <= 0 means no limit.
type Rate struct {
	PerSecond float64
	Burst     int
}

func (r Rate) on() bool { return r.PerSecond > 0 }

// limiter keeps one bucket per caller (a token's accessor, or the client
// address of an anonymous caller) as a GCRA cell: one atomic "theoretical
// arrival time" per caller, advanced by compare-and-swap. The hundreds of
// connections of one busy token share its bucket, so the path takes no
// lock: a mutex there convoys when the machine is overloaded and its
// holder is descheduled. Callers are found in a sync.Map (lock-free for
// known keys); buckets that have refilled carry no state and are swept
// when the map grows.
type limiter struct {
	rate      Rate
	interval  int64 // ns per request at the rate
	tolerance int64 // ns of burst: Burst x interval
	buckets   sync.Map
	count     atomic.Int64
	sweepAt   atomic.Int64
	sweeping  sync.Mutex
}

type bucket struct {
	tat        atomic.Int64 // when the bucket would be full again, unix nanos
	lastReport atomic.Int64 // unix nanos of the last audited refusal
	refused    atomic.Int64 // refusals since then
}

func newLimiter(r Rate) *limiter {
	if r.Burst < 1 {
		r.Burst = max(1, int(math.Ceil(r.PerSecond)))
	}
	interval := max(1, int64(1e9/r.PerSecond))
	l := &limiter{rate: r, interval: interval, tolerance: interval * int64(r.Burst)}
	l.sweepAt.Store(4096)
	return l
}

// verdict is the answer of allow.
type verdict struct {
	ok         bool
	retryAfter time.Duration
	report     bool // the refusal should be audited (at most once a second per caller)
	refused    int  // refusals of this caller not audited before this one
}

// allow takes one request from key's bucket at now.
func (l *limiter) allow(key string, now int64) verdict {
	v, ok := l.buckets.Load(key)
	if !ok {
		if l.count.Load() >= l.sweepAt.Load() {
			l.sweep(now)
		}
		var loaded bool
		if v, loaded = l.buckets.LoadOrStore(key, &bucket{}); !loaded {
			l.count.Add(1)
		}
	}
	b := v.(*bucket)
	for {
		tat := b.tat.Load()
		next := max(tat, now) + l.interval
		if wait := next - now - l.tolerance; wait > 0 {
			out := verdict{retryAfter: time.Duration(wait)}
			n := b.refused.Add(1)
			if last := b.lastReport.Load(); now-last >= int64(time.Second) && b.lastReport.CompareAndSwap(last, now) {
				out.report = true
				out.refused = int(b.refused.Swap(0) - 1)
				_ = n
			}
			return out
		}
		if b.tat.CompareAndSwap(tat, next) {
			return verdict{ok: true}
		}
	}
}

// sweep drops buckets that have refilled completely (they carry no state
// but unaudited refusals younger than a second), one sweeper at a time. A request racing with the drop of its idle bucket
// may get a fresh one: at worst one extra burst for a caller that was idle.
func (l *limiter) sweep(now int64) {
	if !l.sweeping.TryLock() {
		return
	}
	defer l.sweeping.Unlock()
	n := int64(0)
	l.buckets.Range(func(k, v any) bool {
		b := v.(*bucket)
		// Refusals not audited yet are kept for the caller's next
		// refusal, but only for a second: an idle caller's are dropped.
		if b.tat.Load() <= now && (b.refused.Load() == 0 || now-b.lastReport.Load() >= int64(time.Second)) {
			l.buckets.Delete(k)
		} else {
			n++
		}
		return true
	})
	l.count.Store(n)
	l.sweepAt.Store(max(4096, 2*n))
}
