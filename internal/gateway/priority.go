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
// A cluster with one level picks from it directly.
type levelLB struct {
	cfg    subset.Config
	policy balancer.Policy
	// levels and load are swapped whole; picks read them lock-free.
	levels atomic.Pointer[[]*subset.LB]
	load   atomic.Pointer[[]uint32] // cumulative percent by level

	// mu guards the rest: the config goroutine and the health checker
	// write health; lock order: levelLB.mu before subset.LB's own.
	mu      sync.Mutex
	at      map[string]int // host -> level
	healthy map[string]bool
}

func newLevelLB(cfg subset.Config, policy balancer.Policy) (*levelLB, error) {
	first, err := subset.New(cfg, policy, nil)
	if err != nil {
		return nil, err
	}
	l := &levelLB{cfg: cfg, policy: policy, at: map[string]int{}, healthy: map[string]bool{}}
	l.levels.Store(&[]*subset.LB{first})
	l.load.Store(&[]uint32{100})
	return l, nil
}

// Pick picks from a level chosen by the priority load. Any goroutine.
func (l *levelLB) Pick(md map[string]string) (subset.Result, error) {
	return l.level().Pick(md)
}

// PickHash is Pick for a call with a hash.
func (l *levelLB) PickHash(md map[string]string, hash uint64) (subset.Result, error) {
	return l.level().PickHash(md, hash)
}

func (l *levelLB) level() *subset.LB {
	levels := *l.levels.Load()
	if len(levels) == 1 {
		return levels[0]
	}
	load := *l.load.Load()
	r := uint32(rand.IntN(100))
	for i, c := range load {
		if r < c {
			return levels[i]
		}
	}
	return levels[0]
}

// upsert adds or replaces hosts at their levels (a host moving level
// leaves its old one, keeping its health). Writer only.
func (l *levelLB) upsert(hosts []*subset.Host, prio []uint32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	levels := *l.levels.Load()
	need := len(levels)
	for _, p := range prio {
		need = max(need, int(p)+1)
	}
	if need > len(levels) {
		levels = append([]*subset.LB(nil), levels...)
		for len(levels) < need {
			lb, err := subset.New(l.cfg, l.policy, nil)
			if err != nil {
				return err
			}
			levels = append(levels, lb)
		}
		l.levels.Store(&levels)
	}
	by := make([][]*subset.Host, len(levels))
	for i, h := range hosts {
		p := int(prio[i])
		if old, ok := l.at[h.ID]; ok && old != p {
			levels[old].Remove(h.ID)
		}
		by[p] = append(by[p], h)
	}
	for p, hs := range by {
		if len(hs) == 0 {
			continue
		}
		if err := levels[p].Upsert(hs...); err != nil {
			return err
		}
		for _, h := range hs {
			moved := false
			if old, ok := l.at[h.ID]; ok && old != p {
				moved = true
			}
			l.at[h.ID] = p
			if _, ok := l.healthy[h.ID]; !ok {
				l.healthy[h.ID] = true // a new host is healthy, as subset's
			} else if moved && !l.healthy[h.ID] {
				if err := levels[p].SetHealth(h.ID, false); err != nil {
					return err
				}
			}
		}
	}
	l.recompute(levels)
	return nil
}

// SetHealth marks a host healthy or not. Config goroutine or health
// checker.
func (l *levelLB) SetHealth(id string, healthy bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.at[id]
	if !ok {
		return subset.ErrUnknownHost
	}
	levels := *l.levels.Load()
	if err := levels[p].SetHealth(id, healthy); err != nil {
		return err
	}
	if l.healthy[id] != healthy {
		l.healthy[id] = healthy
		l.recompute(levels)
	}
	return nil
}

// Remove removes hosts. Writer only.
func (l *levelLB) Remove(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	levels := *l.levels.Load()
	for _, id := range ids {
		if p, ok := l.at[id]; ok {
			levels[p].Remove(id)
			delete(l.at, id)
			delete(l.healthy, id)
		}
	}
	l.recompute(levels)
}

// recompute publishes the priority load. With l.mu held.
func (l *levelLB) recompute(levels []*subset.LB) {
	counts := make([]locality.Level, len(levels))
	for id, p := range l.at {
		counts[p].Total++
		if l.healthy[id] {
			counts[p].Healthy++
		}
	}
	load := locality.Load(counts, nil)
	var sum uint32
	for i, v := range load {
		sum += v
		load[i] = sum
	}
	l.load.Store(&load)
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
