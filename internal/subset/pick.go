package subset

import (
	"errors"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

// Result is a picked host. Call Done exactly once when the call ends.
type Result struct {
	Host   *Host
	picker balancer.Picker
	idx    int
}

// Done reports the call's outcome to the child policy that picked the host.
// Any goroutine; never blocks.
func (r Result) Done(latency time.Duration, outcome balancer.Outcome) {
	if r.picker != nil {
		r.picker.Done(r.idx, latency, outcome)
	}
}

// reqKV is one request pair whose key some selector uses.
type reqKV struct {
	id int
	v  string
}

// Pick chooses a host for a request with metadata md (key -> value), by the
// rules of docs/subset.md. Any goroutine, concurrently; lock-free and
// allocation-free, except that the first pick from a subset changed since its
// last pick builds that subset's child picker.
func (lb *LB) Pick(md map[string]string) (Result, error) {
	s := lb.snap.Load()
	c := lb.cfg
	var kv [MaxSelectorKeys]reqKV
	n := 0
	var mask uint64
	if len(md) <= MaxSelectorKeys {
		for k, v := range md {
			id, ok := c.keyID[k]
			if !ok {
				mask = 0 // a key no selector has: no selector matches
				n = 0
				break
			}
			// Insertion keeps kv ascending by id, the order of selector keys.
			i := n
			for i > 0 && kv[i-1].id > id {
				kv[i] = kv[i-1]
				i--
			}
			kv[i] = reqKV{id, v}
			n++
			mask |= 1 << id
		}
	}
	return lb.choose(s, kv[:n], mask)
}

func (lb *LB) choose(s *snapshot, kv []reqKV, mask uint64) (Result, error) {
	c := lb.cfg
	for mask != 0 {
		si := c.selector(mask)
		if si < 0 {
			break
		}
		if e := lb.find(s, si, kv, mask); e != nil {
			return lb.pickIn(s, e)
		}
		sel := &c.sels[si]
		switch sel.fb {
		case NoFallback:
			return Result{}, ErrNoSubset
		case AnyEndpoint:
			return lb.pickIn(s, s.any)
		case DefaultSubset:
			return lb.pickIn(s, s.def)
		case KeysSubset:
			mask &= sel.fbMask
			continue
		}
		break // Unset: the cluster's policy
	}
	switch c.fallback {
	case AnyEndpoint:
		return lb.pickIn(s, s.any)
	case DefaultSubset:
		return lb.pickIn(s, s.def)
	}
	return Result{}, ErrNoSubset
}

// find returns the subset of selector si with the request's values of the
// keys in mask, or nil.
func (lb *LB) find(s *snapshot, si int, kv []reqKV, mask uint64) *entry {
	h := lb.hashStart(si)
	for _, p := range kv {
		if mask&(1<<p.id) != 0 {
			h = lb.hashNext(h, p.v)
		}
	}
next:
	for _, e := range s.table.shard(h) {
		if e.hash != h || e.sel != int32(si) {
			continue
		}
		i := 0
		for _, p := range kv {
			if mask&(1<<p.id) != 0 {
				if e.values[i] != p.v {
					continue next
				}
				i++
			}
		}
		return e
	}
	return nil
}

// pickIn picks inside e, or, in panic mode, among all hosts when e has no
// healthy host.
func (lb *LB) pickIn(s *snapshot, e *entry) (Result, error) {
	r, err := lb.pickChild(s, e)
	if err != nil && lb.cfg.panicAny && e != s.any && errors.Is(err, ErrNoHealthyHost) {
		return lb.pickChild(s, s.any)
	}
	return r, err
}

func (lb *LB) pickChild(s *snapshot, e *entry) (Result, error) {
	ch := e.child.Load()
	if ch == nil {
		ch = lb.buildChild(s, e)
	}
	if ch.picker == nil {
		return Result{}, ErrNoHealthyHost
	}
	i, err := ch.picker.Pick()
	if err != nil {
		if errors.Is(err, balancer.ErrNoEndpoint) {
			return Result{}, ErrNoHealthyHost
		}
		return Result{}, err
	}
	return Result{Host: ch.hosts[i], picker: ch.picker, idx: i}, nil
}

// buildChild is the cold path: it builds e's child picker over its healthy
// members in s and publishes it in e, once.
func (lb *LB) buildChild(s *snapshot, e *entry) *child {
	lb.buildMu.Lock()
	defer lb.buildMu.Unlock()
	if ch := e.child.Load(); ch != nil {
		return ch // another pick built it while we waited
	}
	slots := s.members(lb.cfg, e)
	if e.sel >= 0 && lb.cfg.sels[e.sel].single && len(slots) > 1 {
		slots = slots[:1]
	}
	ch := &child{}
	eps := make([]balancer.Endpoint, 0, len(slots))
	for _, slot := range slots {
		r := s.rec(slot)
		if !r.healthy {
			continue
		}
		eps = append(eps, balancer.Endpoint{ID: r.host.ID, Addr: r.host.Addr, Weight: r.weight})
		ch.hosts = append(ch.hosts, r.host)
	}
	if len(eps) > 0 {
		ch.picker = lb.policy.Build(eps)
	}
	e.child.Store(ch)
	return ch
}
