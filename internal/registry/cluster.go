package registry

import (
	"time"
)

// Cluster is this server's share of TTL judgement among several servers
// over one shared store (internal/cluster implements it). Exactly one live
// server judges each instance; the others relay the heartbeats they receive
// to it. nil (Options.Cluster) is a single server that judges everything.
type Cluster interface {
	// Judge reports whether this server judges instance id's TTL now: the
	// number of its unbroken run of judging (its term), 0 if it does not
	// judge id. The term changes when the server judges again after a
	// time it may not have (its lease lapsed): every instance it judges
	// then gets a grace period, as heartbeats may have gone elsewhere
	// meanwhile, even if this server never saw itself stop. Called from the
	// TTL goroutine, the follower and request goroutines; must not block.
	Judge(id string) uint64
	// Relay passes on a heartbeat this server received at at (unix ns) for
	// instance id, which another server judges. Called from request
	// goroutines and the committer; must not block.
	Relay(id string, at int64)
	// Moved is signalled when ownership may have changed (a server joined
	// or left, or this one lost or regained its lease). Received by the
	// TTL goroutine only.
	Moved() <-chan struct{}
	// HeardUntil is a time (unix ns) before which every heartbeat another
	// server received and relayed here has been handed to Beat: an
	// instance whose deadline is later may have a heartbeat still on its
	// way, and is not expired yet. Called from the TTL goroutine; must not
	// block.
	HeardUntil() int64
}

// Beat records a heartbeat another server received at at (unix ns) for
// instance id and relayed here, its owner: the deadline moves to at + 3 x
// ttl, never back. An id "instance\x00check" is an update of a ttl check
// (SetCheck). Called from any goroutine; does not block.
func (r *Registry) Beat(id string, at int64) {
	if r.beatCheck(id, at) {
		return
	}
	v, ok := r.live.Load(id)
	if !ok {
		return
	}
	in := r.table.Get(id)
	if in == nil || in.TTLSeconds == 0 {
		return
	}
	extend(v.(*liveness), ttlDeadline(time.Unix(0, at), in.TTLSeconds))
}

// extend moves l's deadline to d if d is later.
func extend(l *liveness, d int64) {
	for {
		cur := l.deadline.Load()
		if cur >= d || l.deadline.CompareAndSwap(cur, d) {
			return
		}
	}
}

// relay hands a heartbeat of instance id to its owner if that is not this
// server.
func (r *Registry) relay(id string, now time.Time) {
	if r.cluster != nil && r.cluster.Judge(id) == 0 {
		r.cluster.Relay(id, now.UnixNano())
	}
}

// rearm runs when ownership moved: an instance this server now judges and
// did not judge in this term before gets a grace period of a full 3 x ttl
// (heartbeats may have been relayed to its former judge), and an entry in
// the heap. TTL goroutine only.
func (r *Registry) rearm() {
	now := r.opts.Now()
	gained, kept := 0, 0
	r.live.Range(func(k, v any) bool {
		id, l := k.(string), v.(*liveness)
		switch r.judged(id, l, now) {
		case judgedGained:
			gained++
		case judgedKept:
			kept++
		}
		return true
	})
	if gained > 0 {
		r.log.Info("ttl ownership moved", "gained", gained, "kept", kept)
	}
}

const (
	judgedNot = iota
	judgedKept
	judgedGained
)

// judged notes whether this server judges instance id now and, if it did
// not before in the current term, gives it its grace period and a heap
// entry. TTL goroutine only.
func (r *Registry) judged(id string, l *liveness, now time.Time) int {
	cur := r.cluster.Judge(id)
	if prev := l.term.Swap(cur); cur == 0 || prev == cur {
		if cur == 0 {
			return judgedNot
		}
		return judgedKept
	}
	in := r.table.Get(id)
	if in == nil || in.TTLSeconds == 0 {
		return judgedNot
	}
	extend(l, ttlDeadline(now, in.TTLSeconds))
	r.schedule(in, l)
	return judgedGained
}

// trackCluster counts a healthy put of instance id committed at commit
// (unix ns), by any server, as a heartbeat: registers renew the TTL
// wherever they were made. Follower goroutine.
func (r *Registry) trackCluster(l *liveness, ttlSeconds int, commit int64) {
	extend(l, ttlDeadline(time.Unix(0, commit), ttlSeconds))
}
