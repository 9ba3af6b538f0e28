package registry

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
)

// liveness is the heartbeat state of one instance with a TTL. It is the
// registry's, apart from the catalog's immutable instance versions, so that
// a heartbeat is one atomic store and no instance version ever changes.
type liveness struct {
	// deadline is when the instance turns unhealthy without a heartbeat,
	// in unix nanoseconds.
	deadline atomic.Int64
	// sched is the deadline of this instance's entry in the TTL heap (0:
	// none). Guarded by the heap's mutex.
	sched int64
	// term is the cluster term in which this server last saw itself judge
	// the instance (0: it did not; cluster mode only).
	term atomic.Uint64
}

// ttlGraceFactor: an instance turns unhealthy once 3 x its TTL passed
// without a heartbeat.
const ttlGraceFactor = 3

func ttlDeadline(now time.Time, ttlSeconds int) int64 {
	return now.Add(time.Duration(ttlGraceFactor*ttlSeconds) * time.Second).UnixNano()
}

// track updates the TTL state after the catalog applied changes: a new
// instance with a TTL gets its deadline (a full 3 x TTL) and a heap entry;
// a healthy one is scheduled at its current deadline (a revival, or a
// register that moved it); a deleted one, or one without a TTL now, is
// dropped. Follower goroutine only.
func (r *Registry) track(changes []store.Change) {
	now := r.opts.Now()
	for _, sc := range changes {
		for _, op := range sc.Ops {
			if op.Kind != store.Instances {
				continue
			}
			if in, ok := op.Object.(*instance.Instance); ok && op.Absent && in.TTLSeconds == 0 {
				continue // new, without a TTL: it has no liveness to make or drop
			}
			in := r.table.Get(op.Key)
			if in == nil || in.Revision != sc.Revision {
				if in == nil {
					r.live.Delete(op.Key)
					r.forgetChecks(op.Key)
				}
				continue // gone, or changed again later in this stream
			}
			r.trackInstance(in, now)
			if r.cluster != nil && !in.TTLExpired && in.TTLSeconds > 0 {
				if v, ok := r.live.Load(in.ID); ok {
					r.trackCluster(v.(*liveness), in.TTLSeconds, sc.Time)
				}
			}
		}
	}
}

func (r *Registry) trackInstance(in *instance.Instance, now time.Time) {
	if in.TTLSeconds == 0 {
		r.live.Delete(in.ID)
		return
	}
	v, ok := r.live.Load(in.ID)
	if !ok {
		l := new(liveness)
		l.deadline.Store(ttlDeadline(now, in.TTLSeconds))
		if r.cluster != nil {
			l.term.Store(r.cluster.Judge(in.ID))
		}
		v, _ = r.live.LoadOrStore(in.ID, l)
	}
	r.schedule(in, v.(*liveness))
}

// schedule gives instance in the heap entry its state asks for: a live
// one at its deadline, an expired one at its removal (deadline + removal
// delay), if it has a delay.
func (r *Registry) schedule(in *instance.Instance, l *liveness) {
	if !in.TTLExpired {
		r.ttl.push(in.ID, l, l.deadline.Load())
	} else if delay := r.removalDelay(in); delay > 0 {
		r.ttl.push(in.ID, l, l.deadline.Load()+delay)
	}
}

// removalDelay is how long instance in may stay unhealthy before it is
// deregistered, in nanoseconds (0: never): its own delay, else the
// server's default. It counts from the instance's TTL deadline, which
// lives in memory: after a restart, or when another server of a cluster
// takes over its judgement, the deadline is a full 3 x TTL from then, so
// the delay starts again (a removal is late, never early).
func (r *Registry) removalDelay(in *instance.Instance) int64 {
	if in.TTLSeconds == 0 {
		return 0
	}
	if in.DeregisterAfterSeconds > 0 {
		return int64(in.DeregisterAfterSeconds) * int64(time.Second)
	}
	return int64(max(r.opts.DeregisterAfter, 0))
}

// armAll gives every loaded instance with a TTL a fresh deadline: a full 3
// x TTL of grace after a (re)load, since nobody could heartbeat meanwhile.
func (r *Registry) armAll() {
	now := r.opts.Now()
	r.live.Clear()
	r.ttl.reset()
	for _, svc := range r.table.Snapshot().Groups("") {
		for _, in := range svc.Items() {
			r.trackInstance(in, now)
		}
	}
}

// heartbeat moves the deadline of instance in, if it has a TTL.
func (r *Registry) heartbeat(in *instance.Instance, now time.Time) {
	if in.TTLSeconds == 0 {
		return
	}
	if v, ok := r.live.Load(in.ID); ok {
		v.(*liveness).deadline.Store(ttlDeadline(now, in.TTLSeconds))
	}
	r.relay(in.ID, now)
}

// ttlHeap orders TTL deadlines. A heartbeat only moves an instance's
// deadline; the heap entry keeps its old time and, when it comes due, is
// pushed again at the current deadline. So heartbeats never touch the heap,
// and each instance has at most one live entry (liveness.sched).
type ttlHeap struct {
	mu   sync.Mutex
	h    entries
	wake chan struct{} // the earliest deadline moved earlier
}

type ttlEntry struct {
	deadline int64
	id       string
	live     *liveness
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

func (t *ttlHeap) reset() {
	t.mu.Lock()
	t.h = nil
	t.mu.Unlock()
}

// push schedules a check of live at deadline, unless an entry already fires
// no later than that.
func (t *ttlHeap) push(id string, live *liveness, deadline int64) {
	t.mu.Lock()
	if live.sched != 0 && live.sched <= deadline {
		t.mu.Unlock()
		return
	}
	live.sched = deadline
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
		if e.live.sched != e.deadline {
			continue // superseded by an earlier entry
		}
		e.live.sched = 0
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
	var moved <-chan struct{}
	if r.cluster != nil {
		moved = r.cluster.Moved()
		r.rearm()
	}
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
		case <-moved:
			r.rearm()
		}
	}
}

// expireDue turns unhealthy every instance whose deadline has passed and
// returns the next deadline to wake at.
func (r *Registry) expireDue(ctx context.Context) int64 {
	now := r.opts.Now().UnixNano()
	due, next := r.ttl.due(now)
	var flips []flip
	var removals []*instance.Instance
	for _, e := range due {
		if v, ok := r.live.Load(e.id); !ok || v.(*liveness) != e.live {
			continue // deleted, or no TTL any more
		}
		in := r.table.Get(e.id)
		if in == nil || in.TTLSeconds == 0 {
			continue
		}
		if r.cluster != nil {
			// Judged here only if this server has judged it since the
			// start of the current term: otherwise it gets its grace
			// period first (a Moved not received yet), or it is another
			// server's (rearm pushes it again if that changes).
			if r.judged(e.id, e.live, time.Unix(0, now)) != judgedKept {
				continue
			}
		}
		d := e.live.deadline.Load()
		if d > now {
			r.ttl.push(e.id, e.live, d) // heartbeats moved it
			if next == 0 || d < next {
				next = d
			}
			continue
		}
		if r.cluster != nil && r.cluster.HeardUntil() < e.live.deadline.Load() {
			// A heartbeat relayed by another server before the deadline
			// may not be collected yet (a slow or stuck collection):
			// judge it once the collection has caught up.
			again := now + int64(retryExpiry)
			r.ttl.push(e.id, e.live, again)
			if next == 0 || again < next {
				next = again
			}
			continue
		}
		if !in.TTLExpired {
			flips = append(flips, flip{inst: in, healthy: false})
			continue
		}
		// Unhealthy since d: deregistered once its removal delay passed.
		delay := r.removalDelay(in)
		if delay == 0 {
			continue
		}
		if at := d + delay; at > now {
			r.ttl.push(e.id, e.live, at)
			if next == 0 || at < next {
				next = at
			}
			continue
		}
		removals = append(removals, in)
	}
	if len(removals) > 0 {
		if _, err := r.submit(ctx, &removeWrite{r: r, instances: removals}); err != nil && ctx.Err() == nil {
			r.log.Info("removal of expired instances not committed; judging again", "instances", len(removals), "err", err)
			next = r.judgeAgain(removals, next)
		} else if err == nil {
			r.log.Info("deregistered instances unhealthy past their removal delay (unless revived meanwhile)", "instances", len(removals))
		}
	}
	if len(flips) > 0 {
		if _, err := r.submit(ctx, &healthWrite{r: r, flips: flips}); err != nil && ctx.Err() == nil {
			// A failed commit, another server changing one of them first,
			// or the store away: judge them again shortly, on a newer
			// catalog, never drop them (they left the heap when due).
			if r.cluster == nil {
				r.log.Error("ttl expiry not committed; judging again", "instances", len(flips), "err", err)
			} else {
				r.log.Info("ttl expiry not committed; judging again", "instances", len(flips), "err", err)
			}
			insts := make([]*instance.Instance, len(flips))
			for i, f := range flips {
				insts[i] = f.inst
			}
			next = r.judgeAgain(insts, next)
		}
	}
	return next
}

// judgeAgain schedules instances whose expiry or removal was not committed
// to be judged again shortly, and returns the next deadline to wake at.
func (r *Registry) judgeAgain(insts []*instance.Instance, next int64) int64 {
	again := r.opts.Now().Add(retryExpiry).UnixNano()
	for _, in := range insts {
		if v, ok := r.live.Load(in.ID); ok {
			r.ttl.push(in.ID, v.(*liveness), again)
		}
	}
	if next == 0 || again < next {
		next = again
	}
	return next
}

// removeWrite deregisters instances that stayed unhealthy past their
// removal delay: each only if it is still the version judged (a register
// since replaced it, or revived it) and no heartbeat came since. A durable
// delete with its revision, as a deregister.
type removeWrite struct {
	r         *Registry
	instances []*instance.Instance
}

func (w *removeWrite) Plan(tx *commit.Tx) error {
	now := tx.Now().UnixNano()
	for _, in := range w.instances {
		cur, rev := currentInstance(tx, in.ID)
		if cur != in || !cur.TTLExpired {
			continue
		}
		if v, ok := w.r.live.Load(cur.ID); ok && v.(*liveness).deadline.Load()+w.r.removalDelay(cur) > now {
			continue // a heartbeat arrived in between
		}
		tx.DeleteIf(store.Instances, cur.ID, rev)
	}
	return nil
}

// retryExpiry is how soon a cluster server judges again the expiries its
// store refused.
const retryExpiry = 200 * time.Millisecond
