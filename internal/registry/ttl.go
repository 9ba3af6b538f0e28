package registry

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
)

// ttlHeap orders TTL deadlines. A heartbeat only moves an instance's
// Liveness.Deadline; the heap entry keeps its old time and, when it comes
// due, is pushed again at the current deadline. So heartbeats never touch
// the heap, and each instance has at most one live entry (Liveness.Sched).
type ttlHeap struct {
	mu   sync.Mutex
	h    entries
	wake chan struct{} // the earliest deadline moved earlier
}

type ttlEntry struct {
	deadline int64
	id       string
	live     *catalog.Liveness
}

type entries []ttlEntry

func (h entries) Len() int           { return len(h) }
func (h entries) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h entries) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entries) Push(x any)        { *h = append(*h, x.(ttlEntry)) }
func (h *entries) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func newTTLHeap() *ttlHeap { return &ttlHeap{wake: make(chan struct{}, 1)} }

// push schedules a check of live at deadline, unless an entry already fires
// no later than that.
func (t *ttlHeap) push(id string, live *catalog.Liveness, deadline int64) {
	t.mu.Lock()
	if live.Sched != 0 && live.Sched <= deadline {
		t.mu.Unlock()
		return
	}
	live.Sched = deadline
	heap.Push(&t.h, ttlEntry{deadline: deadline, id: id, live: live})
	first := t.h[0].deadline == deadline
	t.mu.Unlock()
	if first {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// due pops the entries due at now and returns them with the next deadline
// (0 if none).
func (t *ttlHeap) due(now int64) ([]ttlEntry, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []ttlEntry
	for len(t.h) > 0 && t.h[0].deadline <= now {
		e := heap.Pop(&t.h).(ttlEntry)
		if e.live.Sched != e.deadline {
			continue // superseded by an earlier entry
		}
		e.live.Sched = 0
		out = append(out, e)
	}
	if len(t.h) > 0 {
		return out, t.h[0].deadline
	}
	return out, 0
}

// ttlLoop sleeps until the earliest deadline and expires what is due.
func (r *Registry) ttlLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := r.expireDue(ctx)
		wait := time.Hour
		if next != 0 {
			wait = max(time.Until(time.Unix(0, next)), time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-r.ttl.wake:
		}
	}
}

// expireDue turns unhealthy every instance whose deadline has passed and
// returns the next deadline to wake at.
func (r *Registry) expireDue(ctx context.Context) int64 {
	now := r.opts.Now().UnixNano()
	due, next := r.ttl.due(now)
	var flips []flip
	for _, e := range due {
		in := r.cat.Get(e.id)
		if in == nil || in.Live != e.live || in.TTLSeconds == 0 {
			continue // deleted, or re-registered without a TTL
		}
		if d := e.live.Deadline.Load(); d > now {
			r.ttl.push(e.id, e.live, d) // heartbeats moved it
			if next == 0 || d < next {
				next = d
			}
			continue
		}
		if in.Healthy {
			flips = append(flips, flip{inst: in, healthy: false})
		}
	}
	if len(flips) > 0 {
		if err := r.submit(ctx, &request{kind: kindHealth, flips: flips}); err != nil && ctx.Err() == nil {
			r.log.Error("ttl expiry not committed", "instances", len(flips), "err", err)
		}
	}
	return next
}
