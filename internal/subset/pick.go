package subset

import (
	"errors"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
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

// Request is what a route asks of the balancer: Envoy's metadata_match, or
// the labels of an Istio DestinationRule subset. Build it once per route
// and reuse it: PickRequest reads it without allocating.
type Request struct {
	// Metadata is the key -> value every chosen host must have.
	Metadata label.Labels
	// FallbackList is used with metadata_fallback_policy FALLBACK_LIST and
	// ignored otherwise: each entry, merged over Metadata (the entry's
	// values win), is tried in order, with every fallback rule, until one
	// gives a host. Metadata alone is tried only when the list is empty.
	FallbackList []label.Labels
}

// reqKV is one request pair whose key the config knows.
type reqKV struct {
	id int
	v  string
}

// Pick chooses a host for a request with metadata md (key -> value), by the
// rules of docs/subset.md. Any goroutine, concurrently; lock-free and
// allocation-free, except that the first pick from a subset changed since its
// last pick builds that subset's child picker. PickRequest is faster (no map
// iteration) and takes a fallback list.
func (lb *LB) Pick(md map[string]string) (Result, error) {
	return lb.pick(md, hashOpt{})
}

// PickHash is Pick for a call that carries a hash (of what a
// consistent-hash policy keys on): a subset whose picker maps hashes
// (balancer.HashPicker) picks the host hash maps to; any other picks as
// Pick does. Same concurrency and costs as Pick.
func (lb *LB) PickHash(md map[string]string, hash uint64) (Result, error) {
	return lb.pick(md, hashOpt{hash, true})
}

// hashOpt is a call's hash, when it has one.
type hashOpt struct {
	v   uint64
	set bool
}

func (lb *LB) pick(md map[string]string, h hashOpt) (Result, error) {
	s := lb.snap.Load()
	var kv [MaxSelectorKeys]reqKV
	b := reqBuf{kv: kv[:]}
	lb.cfg.mapKV(&b, md)
	if b.full {
		return lb.pickMapLarge(s, md, h)
	}
	return lb.choose(s, kv[:b.n], b.mask, h)
}

// PickRequest is Pick for a route's Request, with its fallback list under
// metadata_fallback_policy FALLBACK_LIST; when every entry fails it returns
// the last entry's error. Same concurrency and costs as Pick.
func (lb *LB) PickRequest(r *Request) (Result, error) {
	s := lb.snap.Load()
	if !lb.cfg.fallbackList || len(r.FallbackList) == 0 {
		return lb.pickLabels(s, &r.Metadata, &noLabels)
	}
	var err error
	for i := range r.FallbackList {
		var res Result
		if res, err = lb.pickLabels(s, &r.Metadata, &r.FallbackList[i]); err == nil {
			return res, nil
		}
	}
	return Result{}, err
}

// noLabels is the empty fallback entry.
var noLabels label.Labels

func (lb *LB) pickLabels(s *snapshot, md, over *label.Labels) (Result, error) {
	var kv [MaxSelectorKeys]reqKV
	b := reqBuf{kv: kv[:]}
	lb.cfg.labelsKV(&b, md, over)
	if b.full {
		return lb.pickLabelsLarge(s, md, over)
	}
	return lb.choose(s, kv[:b.n], b.mask, hashOpt{})
}

// pickLabelsLarge and pickMapLarge serve a request naming more known keys
// than a selector may have, which only allow_redundant_keys can narrow to a
// selector. Kept out of line so that common picks do not clear the larger
// array.
//
//go:noinline
func (lb *LB) pickLabelsLarge(s *snapshot, md, over *label.Labels) (Result, error) {
	var kv [MaxKeys]reqKV
	b := reqBuf{kv: kv[:]}
	lb.cfg.labelsKV(&b, md, over)
	return lb.choose(s, kv[:b.n], b.mask, hashOpt{})
}

//go:noinline
func (lb *LB) pickMapLarge(s *snapshot, md map[string]string, h hashOpt) (Result, error) {
	var kv [MaxKeys]reqKV
	b := reqBuf{kv: kv[:]}
	lb.cfg.mapKV(&b, md)
	return lb.choose(s, kv[:b.n], b.mask, h)
}

// reqBuf collects a request's pairs whose keys the config knows, ascending
// by key id (the order of selector keys), and their key mask.
type reqBuf struct {
	kv   []reqKV
	n    int
	mask uint64
	// full: kv was too small for a request allow_redundant_keys may still
	// narrow to a selector.
	full bool
}

// add adds k=v. It returns false when the request can match no selector
// (the buffer is then empty: mask 0) or the buffer is full. A key the config
// does not know makes the request match no selector, unless redundant keys
// are allowed: then it is skipped.
func (c *compiled) add(b *reqBuf, k, v string) bool {
	id := c.kt.id(k)
	if id < 0 && c.redundant {
		return true
	}
	if id < 0 || b.n == len(b.kv) { // unknown, or more keys than any selector has
		b.full = id >= 0 && c.redundant
		b.n, b.mask = 0, 0
		return false
	}
	i := b.n // insertion keeps ids ascending; a no-op for sorted labels
	for i > 0 && b.kv[i-1].id > id {
		b.kv[i] = b.kv[i-1]
		i--
	}
	b.kv[i] = reqKV{id, v}
	b.n++
	b.mask |= 1 << id
	return true
}

// mapKV collects md into b.
func (c *compiled) mapKV(b *reqBuf, md map[string]string) {
	for k, v := range md {
		if !c.add(b, k, v) {
			return
		}
	}
}

// labelsKV collects md merged with over (over's values win) into b. Labels
// are sorted by key and ids follow key order, so b fills in order.
func (c *compiled) labelsKV(b *reqBuf, md, over *label.Labels) {
	mi, oi := md.Pairs(), over.Pairs()
	mkv, mk, mnext, mok := mi.Next()
	okv, ok, onext, ook := oi.Next()
	for mok || ook {
		var kv string
		var k int
		switch {
		case !ook || mok && mkv[:mk] < okv[:ok]:
			kv, k = mkv, mk
			mkv, mk, mnext, mok = mnext.Next()
		case !mok || mkv[:mk] > okv[:ok]:
			kv, k = okv, ok
			okv, ok, onext, ook = onext.Next()
		default: // the fallback entry's value replaces the request's
			kv, k = okv, ok
			mkv, mk, mnext, mok = mnext.Next()
			okv, ok, onext, ook = onext.Next()
		}
		if !c.add(b, kv[:k], kv[k:]) {
			return
		}
	}
}

func (lb *LB) choose(s *snapshot, kv []reqKV, mask uint64, h hashOpt) (Result, error) {
	c := lb.cfg
	for mask != 0 {
		if c.redundant {
			mask = c.narrow(mask)
		}
		si := c.selector(mask)
		if si < 0 {
			break
		}
		if e := lb.find(s, si, kv, mask); e != nil {
			return lb.pickIn(s, e, h)
		}
		sel := &c.sels[si]
		switch sel.fb {
		case NoFallback:
			return Result{}, ErrNoSubset
		case AnyEndpoint:
			return lb.pickIn(s, s.any, h)
		case DefaultSubset:
			return lb.pickIn(s, s.def, h)
		case KeysSubset:
			mask &= sel.fbMask
			continue
		}
		break // Unset: the cluster's policy
	}
	switch c.fallback {
	case AnyEndpoint:
		return lb.pickIn(s, s.any, h)
	case DefaultSubset:
		return lb.pickIn(s, s.def, h)
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
func (lb *LB) pickIn(s *snapshot, e *entry, h hashOpt) (Result, error) {
	r, err := lb.pickChild(s, e, h)
	if err != nil && lb.cfg.panicAny && e != s.any && errors.Is(err, ErrNoHealthyHost) {
		return lb.pickChild(s, s.any, h)
	}
	return r, err
}

func (lb *LB) pickChild(s *snapshot, e *entry, h hashOpt) (Result, error) {
	ch := e.child.Load()
	if ch == nil {
		ch = lb.buildChild(s, e)
	}
	if ch.picker == nil {
		return Result{}, ErrNoHealthyHost
	}
	var i int
	var err error
	if hp, ok := ch.picker.(balancer.HashPicker); ok && h.set {
		i, err = hp.PickHash(h.v)
	} else {
		i, err = ch.picker.Pick()
	}
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
		first := slots[0]
		for _, slot := range slots[1:] {
			if s.rec(slot).added() < s.rec(first).added() {
				first = slot
			}
		}
		slots = []uint32{first}
	}
	ch := &child{}
	eps := make([]balancer.Endpoint, 0, len(slots))
	for _, slot := range slots {
		r := s.rec(slot)
		if !r.healthy() {
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
