package placement

import (
	"encoding/binary"
	"maps"
	"math/bits"
	"slices"

	"github.com/bits-and-blooms/bitset"

	"github.com/sextant-mesh/sextant/internal/label"
)

// Resource buckets group nodes whose resource state is identical
// (allocatable, requested, non-zero requested, pods, scalars): such nodes
// pass or fail NodeResourcesFit together and get the same resource
// scores. A decision for a workload whose other scores are the same on
// every node (no preferences, spreading or inter-pod terms, and no
// PreferNoSchedule taint in the cluster) is then answered per bucket: the
// best bucket's lowest feasible slot wins, exactly the node a per-node
// scan would pick, without touching every node. Clusters are mostly a few
// node shapes, so buckets stay few; past maxBuckets the per-node path runs.
const maxBuckets = 256

// bucketKey is the key label under which buckets are kept in a Postings
// (one value per bucket): the project's list-or-bitset sets, edited in place.
const bucketKey = "r"

type bucket struct {
	res  nodeRes // a member's resources (scoreGen/score unused)
	slot uint32  // a member, for its scalars
}

type buckets struct {
	ix   *label.Postings
	of   []string           // by slot: its bucket value ("" when not live)
	info map[string]*bucket // by value
}

func newBuckets() buckets {
	return buckets{ix: label.NewPostings(0), info: map[string]*bucket{}}
}

// key encodes slot's resource state.
func (e *engine) bucketOf(slot uint32) string {
	r := &e.res[slot]
	b := make([]byte, 0, 96)
	for _, v := range [...]int64{r.allocCPU, r.allocMem, r.allocEph, r.allocPods, r.reqCPU, r.reqMem, r.reqEph, r.nzCPU, r.nzMem, r.pods} {
		b = binary.AppendVarint(b, v)
	}
	if len(e.scalars) == 0 {
		return string(b)
	}
	for _, name := range slices.Sorted(maps.Keys(e.scalars)) {
		c := e.scalars[name]
		if c.alloc[slot] != 0 || c.req[slot] != 0 {
			b = append(b, name...)
			b = append(b, 0)
			b = binary.AppendVarint(b, c.alloc[slot])
			b = binary.AppendVarint(b, c.req[slot])
		}
	}
	return string(b)
}

// rebucket moves slot to the bucket of its current state. Writer only;
// called whenever a live node's resources change.
func (e *engine) rebucket(slot uint32) {
	if e.bulk {
		return
	}
	bs := &e.buckets
	for int(slot) >= len(bs.of) {
		bs.of = append(bs.of, "")
	}
	old := bs.of[slot]
	next := ""
	if e.nodes[slot] != nil {
		next = e.bucketOf(slot)
	}
	if old == next {
		return
	}
	if old != "" {
		bs.ix.Remove(slot, bucketKey, old)
		if bs.ix.Get(bucketKey, old) == nil {
			delete(bs.info, old)
		} else if bs.info[old].slot == slot {
			bs.info[old].slot = firstSlot(bs.ix.Get(bucketKey, old))
		}
	}
	bs.of[slot] = next
	if next != "" {
		bs.ix.Add(slot, bucketKey, next)
		if bs.info[next] == nil {
			bs.info[next] = &bucket{res: e.res[slot], slot: slot}
		}
	}
}

func firstSlot(p *label.Posting) uint32 {
	if b := p.Bits(); b != nil {
		s, _ := b.NextSet(0)
		return uint32(s)
	}
	return p.List()[0]
}

// lowestIn returns the lowest slot of p that is in cand.
func lowestIn(p *label.Posting, cand *bitset.BitSet) (uint32, bool) {
	if b := p.Bits(); b != nil {
		bw, cw := b.Words(), cand.Words()
		for i := range min(len(bw), len(cw)) {
			if w := bw[i] & cw[i]; w != 0 {
				return uint32(i<<6 + bits.TrailingZeros64(w)), true
			}
		}
		return 0, false
	}
	for _, s := range p.List() {
		if cand.Test(uint(s)) {
			return s, true
		}
	}
	return 0, false
}

// fastPath reports whether w's decision depends on nothing but resources
// among the nodes that pass the static filters.
func (e *engine) fastPath(w *Workload) bool {
	if len(w.spread) > 0 || w.Affinity != nil || len(e.groups.m) > 0 || len(w.preferred) > 0 || len(e.buckets.info) > maxBuckets {
		return false
	}
	for i := range e.taints.list {
		if te := &e.taints.list[i]; te.n > 0 && te.t.Effect == "PreferNoSchedule" {
			return false
		}
	}
	return true
}

// fits is NodeResourcesFit for one bucket (no reasons: the fast path
// only answers when some bucket fits).
func (e *engine) fits(b *bucket, w *Workload) bool {
	r := &b.res
	if r.pods+1 > r.allocPods {
		return false
	}
	req := &w.Requests
	if req.CPU == 0 && req.Memory == 0 && req.EphemeralStorage == 0 && len(req.Scalars) == 0 {
		return true
	}
	if req.CPU > 0 && req.CPU > r.allocCPU-r.reqCPU || req.Memory > 0 && req.Memory > r.allocMem-r.reqMem ||
		req.EphemeralStorage > 0 && req.EphemeralStorage > r.allocEph-r.reqEph {
		return false
	}
	for _, s := range req.Scalars {
		var free int64
		if c := e.scalars[s.Name]; c != nil {
			free = c.alloc[b.slot] - c.req[b.slot]
		}
		if s.Value > free {
			return false
		}
	}
	return true
}

// decideBuckets answers a fast-path workload given the nodes that pass the
// static filters: the best-scoring fitting bucket with a node in cand, and
// its lowest such node. false when no bucket fits (the caller then runs
// the per-node filters for kube-scheduler's reasons).
func (e *engine) decideBuckets(w *Workload, cand *bitset.BitSet) (uint32, bool) {
	type scored struct {
		p     *label.Posting
		score int64
	}
	var fit []scored
	for v, b := range e.buckets.info {
		if e.fits(b, w) {
			fit = append(fit, scored{e.buckets.ix.Get(bucketKey, v), resourceScore(&b.res, w)})
		}
	}
	slices.SortFunc(fit, func(a, b scored) int { return int(b.score - a.score) })
	for i := 0; i < len(fit); {
		j := i
		best, found := uint32(0), false
		for ; j < len(fit) && fit[j].score == fit[i].score; j++ {
			if s, ok := lowestIn(fit[j].p, cand); ok && (!found || s < best) {
				best, found = s, true
			}
		}
		if found {
			return best, true
		}
		i = j
	}
	return 0, false
}
