package gateway

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/locality"
	"github.com/sextant-mesh/sextant/internal/subset"
)

// levelLB is a cluster's balancer by EDS priority (Envoy's priority
// levels): one subset balancer per level, all over the cluster's one
// policy, and the share of calls each level takes (locality.Load: a
// level's healthy share times the overprovisioning factor 1.4, the rest
// spilling to the next level), recomputed whenever a host's health or
// level changes. Health is EDS health and the gateway's own active health
// check together, so a zone whose endpoints the registry or the gateway
// finds down fails over to the next level without any outlierDetection.
// A cluster with locality_weighted_lb_config has one balancer per
// locality of a level instead, a level's calls split by the localities'
// weights times their healthy share (Envoy's locality weighted load
// balancing). A cluster with one balancer picks from it directly.
type levelLB struct {
	cfg      subset.Config
	policy   balancer.Policy
	weighted bool // locality weights followed
	// pickers is swapped whole; picks read it lock-free.
	pickers atomic.Pointer[levelPickers]

	// mu guards the rest: the config goroutine and the health checker
	// write health; lock order: levelLB.mu before subset.LB's own.
	mu      sync.Mutex
	buckets []*bucket
	at      map[string]int // host -> bucket
	healthy map[string]bool
}

// bucket is the hosts of one locality of one level (one level when
// locality weights are not followed).
type bucket struct {
	level  uint32
	loc    locality.Locality
	weight uint32 // the locality's weight (0 read as 1)
	lb     *subset.LB
}

// levelPickers is what picks read: the cumulative priority load and each
// level's health (for a retry's load without the levels tried), and per
// level its buckets with their cumulative effective weights.
type levelPickers struct {
	load   []uint32 // cumulative percent by level
	health []uint32 // locality.Health by level
	levels [][]*subset.LB
	cum    [][]uint64 // cumulative effective weights, by level
	single *subset.LB // the only balancer, when there is one
	level  uint32     // single's level
}

// hostPlace is where a host goes: its level, and its locality with the
// locality's weight.
type hostPlace struct {
	level  uint32
	loc    locality.Locality
	weight uint32
}

func newLevelLB(cfg subset.Config, policy balancer.Policy, weighted bool) (*levelLB, error) {
	first, err := subset.New(cfg, policy, nil)
	if err != nil {
		return nil, err
	}
	l := &levelLB{cfg: cfg, policy: policy, weighted: weighted, at: map[string]int{}, healthy: map[string]bool{},
		buckets: []*bucket{{lb: first}}}
	l.pickers.Store(&levelPickers{single: first})
	return l, nil
}

// Pick picks from a level chosen by the priority load. Any goroutine.
func (l *levelLB) Pick(md map[string]string) (subset.Result, error) {
	lb, _ := l.choose(0)
	return lb.Pick(md)
}

// PickHash is Pick for a call with a hash.
func (l *levelLB) PickHash(md map[string]string, hash uint64) (subset.Result, error) {
	lb, _ := l.choose(0)
	return lb.PickHash(md, hash)
}

// pickSkip is Pick (PickHash when hashed) from the priority load without
// the levels in skip (a bit per level below 64: the levels a call tried,
// for Envoy's previous_priorities retry priority; the unmodified load when
// no level left has health), and the level it picked from.
func (l *levelLB) pickSkip(md map[string]string, hash uint64, hashed bool, skip uint64) (subset.Result, uint32, error) {
	lb, lv := l.choose(skip)
	var res subset.Result
	var err error
	if hashed {
		res, err = lb.PickHash(md, hash)
	} else {
		res, err = lb.Pick(md)
	}
	return res, lv, err
}

// levelBit is level's bit in a skip set; levels from 64 on have none.
func levelBit(level uint32) uint64 {
	if level >= 64 {
		return 0
	}
	return 1 << level
}

func (l *levelLB) choose(skip uint64) (*subset.LB, uint32) {
	p := l.pickers.Load()
	if p.single != nil {
		return p.single, p.level
	}
	r := uint32(rand.IntN(100))
	lv, ok := 0, false
	if skip != 0 {
		lv, ok = locality.LevelOf(p.health, skip, r)
	}
	if !ok {
		lv = 0
		for i, c := range p.load {
			if r < c {
				lv = i
				break
			}
		}
	}
	lbs, cum := p.levels[lv], p.cum[lv]
	if len(lbs) == 1 || cum[len(cum)-1] == 0 {
		return lbs[0], uint32(lv)
	}
	w := rand.Uint64N(cum[len(cum)-1])
	for i, c := range cum {
		if w < c {
			return lbs[i], uint32(lv)
		}
	}
	return lbs[0], uint32(lv)
}

// bucketFor returns the bucket of place, made if new. With l.mu held.
func (l *levelLB) bucketFor(pl hostPlace) (int, error) {
	if !l.weighted {
		pl.loc, pl.weight = locality.Locality{}, 0
	}
	for i, b := range l.buckets {
		if b.level == pl.level && b.loc == pl.loc {
			b.weight = pl.weight
			return i, nil
		}
	}
	lb, err := subset.New(l.cfg, l.policy, nil)
	if err != nil {
		return 0, err
	}
	l.buckets = append(l.buckets, &bucket{level: pl.level, loc: pl.loc, weight: pl.weight, lb: lb})
	return len(l.buckets) - 1, nil
}

// upsert adds or replaces hosts at their places (a host moving leaves its
// old bucket, keeping its health). Writer only.
func (l *levelLB) upsert(hosts []*subset.Host, places []hostPlace) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	by := map[int][]*subset.Host{}
	for i, h := range hosts {
		bi, err := l.bucketFor(places[i])
		if err != nil {
			return err
		}
		if old, ok := l.at[h.ID]; ok && old != bi {
			l.buckets[old].lb.Remove(h.ID)
		}
		by[bi] = append(by[bi], h)
	}
	for bi, hs := range by {
		if err := l.buckets[bi].lb.Upsert(hs...); err != nil {
			return err
		}
		for _, h := range hs {
			old, had := l.at[h.ID]
			l.at[h.ID] = bi
			if !had {
				l.healthy[h.ID] = true // a new host is healthy, as subset's
			} else if old != bi && !l.healthy[h.ID] {
				if err := l.buckets[bi].lb.SetHealth(h.ID, false); err != nil {
					return err
				}
			}
		}
	}
	l.recompute()
	return nil
}

// SetHealth marks a host healthy or not. Config goroutine or health
// checker.
func (l *levelLB) SetHealth(id string, healthy bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	bi, ok := l.at[id]
	if !ok {
		return subset.ErrUnknownHost
	}
	if err := l.buckets[bi].lb.SetHealth(id, healthy); err != nil {
		return err
	}
	if l.healthy[id] != healthy {
		l.healthy[id] = healthy
		l.recompute()
	}
	return nil
}

// Remove removes hosts. Writer only.
func (l *levelLB) Remove(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		if bi, ok := l.at[id]; ok {
			l.buckets[bi].lb.Remove(id)
			delete(l.at, id)
			delete(l.healthy, id)
		}
	}
	l.recompute()
}

// recompute publishes the priority load and the localities' effective
// weights. With l.mu held.
func (l *levelLB) recompute() {
	n := make([]locality.Level, len(l.buckets))
	for id, bi := range l.at {
		n[bi].Total++
		if l.healthy[id] {
			n[bi].Healthy++
		}
	}
	used := 0
	levels := 0
	for i, b := range l.buckets {
		if n[i].Total > 0 {
			used++
			levels = max(levels, int(b.level)+1)
		}
	}
	if used <= 1 {
		for i, b := range l.buckets {
			if n[i].Total > 0 || i == len(l.buckets)-1 {
				l.pickers.Store(&levelPickers{single: b.lb, level: b.level})
				return
			}
		}
	}
	counts := make([]locality.Level, levels)
	p := &levelPickers{levels: make([][]*subset.LB, levels), cum: make([][]uint64, levels)}
	for i, b := range l.buckets {
		if n[i].Total == 0 {
			continue
		}
		counts[b.level].Total += n[i].Total
		counts[b.level].Healthy += n[i].Healthy
		// Envoy's effective locality weight: its weight times its healthy
		// share with overprovisioning, at most 1.
		share := min(1, locality.OverprovisioningFactor*float64(n[i].Healthy)/float64(n[i].Total))
		var prev uint64
		if c := p.cum[b.level]; len(c) > 0 {
			prev = c[len(c)-1]
		}
		p.levels[b.level] = append(p.levels[b.level], b.lb)
		p.cum[b.level] = append(p.cum[b.level], prev+uint64(float64(max(b.weight, 1))*share*1000))
	}
	for lv := range p.levels {
		if len(p.levels[lv]) == 0 {
			// An empty level (its hosts moved): never chosen, load 0.
			p.levels[lv] = []*subset.LB{l.buckets[0].lb}
			p.cum[lv] = []uint64{0}
		}
	}
	p.load = locality.Load(counts, nil)
	p.health = make([]uint32, levels)
	for lv, c := range counts {
		p.health[lv] = locality.Health(c)
	}
	var sum uint32
	for i, v := range p.load {
		sum += v
		p.load[i] = sum
	}
	l.pickers.Store(p)
}

// localize gives hosts Istio's priorities as seen from self (same
// subzone, zone, region, then the rest) when self is known and the
// assignment has no priorities of its own (all 0): the control plane's
// EDS is the same for every subscriber, the gateway knows where it is.
// Otherwise hosts as they are.
func localize(self locality.Locality, hosts []hostSpec) []hostSpec {
	if self == (locality.Locality{}) {
		return hosts
	}
	locs := make([]locality.Locality, len(hosts))
	for i, h := range hosts {
		if h.priority != 0 {
			return hosts
		}
		locs[i] = h.locality
	}
	prio := locality.Priorities(self, locs, nil)
	out := make([]hostSpec, len(hosts))
	for i, h := range hosts {
		h.priority = prio[i]
		out[i] = h
	}
	return out
}
