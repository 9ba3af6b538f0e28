package placement

import (
	"slices"

	"github.com/bits-and-blooms/bitset"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextant-mesh/sextant/internal/label"
)

// engine is the decision state: nodes by slot with their free resources,
// the indexes filters are answered from, the placements, and the counts
// kept per slot for spreading and inter-pod terms. One writer owns it
// (the Scheduler's writer lock); nothing else reads it.
//
// Slots are handed out in Seq order and never reused until the state is
// rebuilt, so "lowest slot" is "lowest Seq": the tie-break.
type engine struct {
	nodes      []*Node // by slot; nil once deleted
	live       *bitset.BitSet
	nlive      int
	byName     map[string]uint32
	labels     *label.Postings // node labels by slot; the engine's own (readers have theirs), edited in place
	unsched    *bitset.BitSet
	taints     taintIndex
	nodeTaints [][]int32 // by slot: taint ids in the node's order
	res        []nodeRes
	scalars    map[string]*scalarCol
	onNode     [][]*Placement // by slot
	placements map[Key]*Placement
	byNS       map[string]map[string]*Placement
	nextSeq    uint64
	matchers   matcherCache
	groups     termGroups
	topo       map[string]*domainIndex // by topology key; dropped when labels change
	gen        uint32                  // generation of the cached resource scores
	class      podClass                // the pod class gen was computed for
	buckets    buckets
	bulk       bool  // build in progress: buckets are made at the end
	pool       *pool // splits the per-node loops; nil: the writer runs them alone
}

// nodeRes is a node's resources, laid out for the filter loop.
type nodeRes struct {
	allocCPU, allocMem, allocEph, allocPods int64
	reqCPU, reqMem, reqEph                  int64
	nzCPU, nzMem                            int64
	pods                                    int64
	scoreGen                                uint32 // score valid for the pod class of this generation
	score                                   int32  // LeastAllocated + BalancedAllocation, cached
}

// scalarCol holds one scalar resource for every slot.
type scalarCol struct {
	alloc, req []int64
}

type taintIndex struct {
	ids  map[Taint]int32
	list []taintEntry
}

type taintEntry struct {
	t     corev1.Taint
	nodes *bitset.BitSet
	n     int
}

func newEngine() *engine {
	return &engine{
		live: bitset.New(0), byName: map[string]uint32{}, labels: label.NewPostings(0),
		unsched: bitset.New(0), taints: taintIndex{ids: map[Taint]int32{}},
		scalars: map[string]*scalarCol{}, placements: map[Key]*Placement{},
		byNS: map[string]map[string]*Placement{}, nextSeq: 1,
		matchers: matcherCache{m: map[string]*matcher{}}, groups: termGroups{m: map[string]*termGroup{}},
		topo: map[string]*domainIndex{}, gen: 1, buckets: newBuckets(),
	}
}

// invalidate marks slot's cached score stale.
func (e *engine) invalidate(slot uint32) { e.res[slot].scoreGen = 0 }

func (e *engine) scalar(name string) *scalarCol {
	c := e.scalars[name]
	if c == nil {
		c = &scalarCol{alloc: make([]int64, len(e.nodes)), req: make([]int64, len(e.nodes))}
		e.scalars[name] = c
	}
	return c
}

// addNode appends a node in a new slot (n.Seq must exceed every Seq so far).
func (e *engine) addNode(n *Node) uint32 {
	slot := uint32(len(e.nodes))
	e.nodes = append(e.nodes, nil)
	e.res = append(e.res, nodeRes{})
	e.nodeTaints = append(e.nodeTaints, nil)
	e.onNode = append(e.onNode, nil)
	for _, c := range e.scalars {
		c.alloc = append(c.alloc, 0)
		c.req = append(c.req, 0)
	}
	for _, m := range e.matchers.m {
		m.counts = append(m.counts, 0)
	}
	for _, g := range e.groups.m {
		g.counts = append(g.counts, 0)
	}
	if n.Seq >= e.nextSeq {
		e.nextSeq = n.Seq + 1
	}
	e.setNode(slot, n)
	return slot
}

// setNode installs n at slot, replacing what was there (placements stay).
func (e *engine) setNode(slot uint32, n *Node) {
	old := e.nodes[slot]
	e.nodes[slot] = n
	if old == nil {
		e.live.Set(uint(slot))
		e.nlive++
	}
	e.byName[n.Name] = slot
	if old == nil || !old.Labels.Equal(n.Labels) {
		if old != nil {
			for k, v := range old.Labels.All() {
				e.labels.Remove(slot, k, v)
			}
		}
		for k, v := range n.Labels.All() {
			e.labels.Add(slot, k, v)
		}
		clear(e.topo)
	}
	e.unsched.SetTo(uint(slot), n.Unschedulable)
	e.setTaints(slot, n.Taints)
	r := &e.res[slot]
	r.allocCPU, r.allocMem, r.allocEph, r.allocPods = n.Allocatable.CPU, n.Allocatable.Memory, n.Allocatable.EphemeralStorage, n.Pods
	for _, c := range e.scalars {
		c.alloc[slot] = 0
	}
	for _, s := range n.Allocatable.Scalars {
		e.scalar(s.Name).alloc[slot] = s.Value
	}
	e.invalidate(slot)
	e.rebucket(slot)
}

func (e *engine) setTaints(slot uint32, ts []Taint) {
	for _, id := range e.nodeTaints[slot] {
		te := &e.taints.list[id]
		te.nodes.Clear(uint(slot))
		te.n--
	}
	ids := make([]int32, 0, len(ts))
	for _, t := range ts {
		id, ok := e.taints.ids[t]
		if !ok {
			id = int32(len(e.taints.list))
			e.taints.ids[t] = id
			e.taints.list = append(e.taints.list, taintEntry{t: corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}, nodes: bitset.New(0)})
		}
		te := &e.taints.list[id]
		te.nodes.Set(uint(slot))
		te.n++
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		ids = nil
	}
	e.nodeTaints[slot] = ids
}

// removeNode empties slot; its placements must have been removed.
func (e *engine) removeNode(slot uint32) *Node {
	n := e.nodes[slot]
	for k, v := range n.Labels.All() {
		e.labels.Remove(slot, k, v)
	}
	clear(e.topo)
	e.setTaints(slot, nil)
	e.unsched.Clear(uint(slot))
	e.live.Clear(uint(slot))
	e.nlive--
	delete(e.byName, n.Name)
	e.nodes[slot] = nil
	e.res[slot] = nodeRes{}
	for _, c := range e.scalars {
		c.alloc[slot], c.req[slot] = 0, 0
	}
	e.rebucket(slot)
	return n
}

// dropLastSlot gives back slot, emptied by removeNode, if it is the last
// one: an aborted addNode. Undone in reverse order, a Txn's new nodes all
// give their slots back, so an aborted Txn leaves no dead slots and the
// same Txn applied later (Scheduler.Apply) takes the same slots.
func (e *engine) dropLastSlot(slot uint32) {
	if int(slot) != len(e.nodes)-1 || e.nodes[slot] != nil || len(e.onNode[slot]) > 0 {
		return
	}
	e.nodes, e.res = e.nodes[:slot], e.res[:slot]
	e.nodeTaints, e.onNode = e.nodeTaints[:slot], e.onNode[:slot]
	for _, c := range e.scalars {
		c.alloc, c.req = c.alloc[:slot], c.req[:slot]
	}
	for _, m := range e.matchers.m {
		m.counts = m.counts[:min(len(m.counts), int(slot))]
	}
	for _, g := range e.groups.m {
		g.counts = g.counts[:min(len(g.counts), int(slot))]
	}
	if len(e.buckets.of) > int(slot) {
		e.buckets.of = e.buckets.of[:slot]
	}
}

// addPlacement reserves p's resources on slot and counts it everywhere.
func (e *engine) addPlacement(p *Placement, slot uint32) {
	e.placements[p.Key] = p
	ns := e.byNS[p.Namespace]
	if ns == nil {
		ns = map[string]*Placement{}
		e.byNS[p.Namespace] = ns
	}
	ns[p.Name] = p
	e.onNode[slot] = append(e.onNode[slot], p)
	e.account(p, slot, 1)
}

func (e *engine) removePlacement(p *Placement, slot uint32) {
	delete(e.placements, p.Key)
	if ns := e.byNS[p.Namespace]; ns != nil {
		delete(ns, p.Name)
		if len(ns) == 0 {
			delete(e.byNS, p.Namespace)
		}
	}
	l := e.onNode[slot]
	if i := slices.Index(l, p); i >= 0 {
		l[i] = l[len(l)-1]
		l[len(l)-1] = nil
		e.onNode[slot] = l[:len(l)-1]
	}
	e.account(p, slot, -1)
}

func (e *engine) account(p *Placement, slot uint32, sign int64) {
	r := &e.res[slot]
	r.reqCPU += sign * p.Requests.CPU
	r.reqMem += sign * p.Requests.Memory
	r.reqEph += sign * p.Requests.EphemeralStorage
	r.nzCPU += sign * p.NonZeroCPU
	r.nzMem += sign * p.NonZeroMemory
	r.pods += sign
	for _, s := range p.Requests.Scalars {
		e.scalar(s.Name).req[slot] += sign * s.Value
	}
	e.invalidate(slot)
	e.rebucket(slot)
	e.matchers.account(p, slot, int32(sign))
	if p.Affinity != nil {
		e.groups.account(p, slot, int32(sign), len(e.nodes))
	}
}
