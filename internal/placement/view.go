package placement

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/bits-and-blooms/bitset"
	"github.com/google/btree"

	"github.com/sextant-mesh/sextant/internal/label"
)

// view is what readers see: committed nodes and placements. The writer
// changes it only in Commit, under mu, for O(records changed); readers
// hold mu.RLock only while they copy out their answer, so they never wait
// for a decision or a durable write.
type view struct {
	mu         sync.RWMutex
	rev        int64
	nodes      *btree.BTreeG[*nodeItem] // by name
	byName     map[string]*nodeItem
	slots      []*nodeItem     // by engine slot
	labels     *label.Postings // node labels by slot: the readers' own copy, edited in place under mu
	live       *bitset.BitSet
	placements *btree.BTreeG[*Placement] // by namespace/name
}

type nodeItem struct {
	node      *Node
	slot      uint32
	requested Resources
	pods      []*Placement // unsorted
}

// NodeInfo is a node with what is reserved on it.
type NodeInfo struct {
	Node       *Node
	Requested  Resources
	Placements int
}

func (it *nodeItem) info() NodeInfo {
	return NodeInfo{Node: it.node, Requested: it.requested, Placements: len(it.pods)}
}

func lessNode(a, b *nodeItem) bool       { return a.node.Name < b.node.Name }
func lessPlacement(a, b *Placement) bool { return a.Key.compare(b.Key) < 0 }

// requested reads slot's reserved resources from the engine.
func (e *engine) requested(slot uint32) Resources {
	r := &e.res[slot]
	out := Resources{CPU: r.reqCPU, Memory: r.reqMem, EphemeralStorage: r.reqEph}
	for _, name := range slices.Sorted(maps.Keys(e.scalars)) {
		if v := e.scalars[name].req[slot]; v != 0 {
			out.Scalars = append(out.Scalars, Scalar{Name: name, Value: v})
		}
	}
	return out
}

// reset rebuilds the view from the engine (load, rebuild); ps are the
// engine's placements sorted by key, or nil to sort them here. Writer only.
func (v *view) reset(e *engine, rev int64, ps []*Placement) {
	items := make([]*nodeItem, 0, e.nlive)
	slots := make([]*nodeItem, len(e.nodes))
	for slot, n := range e.nodes {
		if n == nil {
			continue
		}
		it := &nodeItem{node: n, slot: uint32(slot), requested: e.requested(uint32(slot)), pods: slices.Clone(e.onNode[slot])}
		items = append(items, it)
		slots[slot] = it
	}
	slices.SortFunc(items, func(a, b *nodeItem) int { return strings.Compare(a.node.Name, b.node.Name) })
	nodes := btree.NewG(32, lessNode)
	byName := make(map[string]*nodeItem, len(items))
	for _, it := range items {
		nodes.ReplaceOrInsert(it)
		byName[it.node.Name] = it
	}
	if ps == nil {
		ps = slices.Collect(maps.Values(e.placements))
		slices.SortFunc(ps, func(a, b *Placement) int { return a.Key.compare(b.Key) })
	}
	placements := btree.NewG(32, lessPlacement)
	for _, p := range ps {
		placements.ReplaceOrInsert(p)
	}
	// The readers' label index is their own: a node write then edits both
	// in place, where a shared copy-on-write index would copy a key's whole
	// value map (every hostname) at each write.
	lb := label.NewPostingsBuilder(uint32(len(e.nodes)))
	handles := map[string]int{}
	for slot, n := range e.nodes {
		if n == nil {
			continue
		}
		for k, val := range n.Labels.All() {
			h, ok := handles[k]
			if !ok {
				h = lb.Key(k)
				handles[k] = h
			}
			lb.AppendSlot(h, val, uint32(slot))
		}
	}
	labels := lb.Build()
	v.mu.Lock()
	v.rev, v.nodes, v.byName, v.slots, v.labels, v.live, v.placements = rev, nodes, byName, slots, labels, e.live.Clone(), placements
	v.mu.Unlock()
}

// apply publishes a committed Txn. Writer only.
func (v *view) apply(e *engine, rev int64, ops []Op, touched map[uint32]struct{}, nodesChanged bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.rev = rev
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Kind == KindNodes && op.Delete:
			if it := v.byName[op.Key]; it != nil {
				for k, val := range it.node.Labels.All() {
					v.labels.Remove(it.slot, k, val)
				}
				v.nodes.Delete(it)
				delete(v.byName, op.Key)
				v.slots[it.slot] = nil
			}
		case op.Kind == KindNodes:
			// Publish the node as it is at the end of the Txn: a later op
			// may replace it, but placements made on it in between (the
			// ops that follow) need its item now.
			slot, ok := e.byName[op.Node.Name]
			if !ok {
				continue // deleted later in the same Txn
			}
			n := e.nodes[slot]
			if it := v.byName[n.Name]; it != nil {
				if !it.node.Labels.Equal(n.Labels) {
					for k, val := range it.node.Labels.All() {
						v.labels.Remove(it.slot, k, val)
					}
					for k, val := range n.Labels.All() {
						v.labels.Add(it.slot, k, val)
					}
				}
				it.node = n
				continue
			}
			for int(slot) >= len(v.slots) {
				v.slots = append(v.slots, nil)
			}
			it := &nodeItem{node: n, slot: slot}
			v.nodes.ReplaceOrInsert(it)
			v.byName[n.Name] = it
			v.slots[slot] = it
			for k, val := range n.Labels.All() {
				v.labels.Add(slot, k, val)
			}
		case op.Kind == KindPlacements && op.Delete:
			var k Key
			_ = k.parse(op.Key)
			if p, ok := v.placements.Delete(&Placement{Key: k}); ok {
				if it := v.byName[p.Node]; it != nil {
					if j := slices.Index(it.pods, p); j >= 0 {
						it.pods = slices.Delete(it.pods, j, j+1)
					}
				}
			}
		case op.Kind == KindPlacements:
			v.placements.ReplaceOrInsert(op.Placement)
			if it := v.byName[op.Placement.Node]; it != nil {
				it.pods = append(it.pods, op.Placement)
			}
		}
	}
	for slot := range touched {
		if int(slot) < len(v.slots) && v.slots[slot] != nil {
			v.slots[slot].requested = e.requested(slot)
		}
	}
	if nodesChanged {
		v.live = e.live.Clone()
	}
}

// Revision returns the revision readers see.
func (s *Scheduler) Revision() int64 {
	s.v.mu.RLock()
	defer s.v.mu.RUnlock()
	return s.v.rev
}

// Node returns one node with what is reserved on it.
func (s *Scheduler) Node(name string) (NodeInfo, int64, bool) {
	s.v.mu.RLock()
	defer s.v.mu.RUnlock()
	it := s.v.byName[name]
	if it == nil {
		return NodeInfo{}, s.v.rev, false
	}
	return it.info(), s.v.rev, true
}

// Nodes lists nodes whose labels match sel (nil: all) in name order,
// starting after the name after, at most limit (<= 0: no limit). more
// reports whether nodes remain past the last one returned.
func (s *Scheduler) Nodes(sel label.Selector, after string, limit int) (items []NodeInfo, rev int64, more bool) {
	s.v.mu.RLock()
	defer s.v.mu.RUnlock()
	v := &s.v
	if len(sel) == 0 {
		v.nodes.AscendGreaterOrEqual(&nodeItem{node: &Node{Name: after}}, func(it *nodeItem) bool {
			if it.node.Name == after && after != "" {
				return true
			}
			if limit > 0 && len(items) == limit {
				more = true
				return false
			}
			items = append(items, it.info())
			return true
		})
		return items, v.rev, more
	}
	var hits []*nodeItem
	forEach(v.labels.Match(sel, v.live), func(slot uint32) {
		if it := v.slots[slot]; it != nil && (after == "" || it.node.Name > after) {
			hits = append(hits, it)
		}
	})
	slices.SortFunc(hits, func(a, b *nodeItem) int { return strings.Compare(a.node.Name, b.node.Name) })
	if limit > 0 && len(hits) > limit {
		hits, more = hits[:limit], true
	}
	items = make([]NodeInfo, len(hits))
	for i, it := range hits {
		items[i] = it.info()
	}
	return items, v.rev, more
}

// Placement returns one placement.
func (s *Scheduler) Placement(k Key) (*Placement, int64, bool) {
	s.v.mu.RLock()
	defer s.v.mu.RUnlock()
	p, ok := s.v.placements.Get(&Placement{Key: k})
	return p, s.v.rev, ok
}

// PlacementQuery filters a placement listing; zero fields do not filter.
type PlacementQuery struct {
	Namespace string
	Node      string
	Selector  label.Selector // over the workload's labels
	After     Key            // list keys after this one
	Limit     int            // <= 0: no limit
}

// Placements lists placements in namespace/name order.
func (s *Scheduler) Placements(q PlacementQuery) (items []*Placement, rev int64, more bool) {
	s.v.mu.RLock()
	defer s.v.mu.RUnlock()
	v := &s.v
	ok := func(p *Placement) bool {
		return (q.Namespace == "" || p.Namespace == q.Namespace) && (q.Node == "" || p.Node == q.Node) &&
			(len(q.Selector) == 0 || q.Selector.Matches(p.Labels)) && p.Key.compare(q.After) > 0
	}
	take := func(p *Placement) bool {
		if !ok(p) {
			return true
		}
		if q.Limit > 0 && len(items) == q.Limit {
			more = true
			return false
		}
		items = append(items, p)
		return true
	}
	if q.Node != "" {
		it := v.byName[q.Node]
		if it == nil {
			return nil, v.rev, false
		}
		ps := slices.Clone(it.pods)
		slices.SortFunc(ps, func(a, b *Placement) int { return a.Key.compare(b.Key) })
		for _, p := range ps {
			if !take(p) {
				break
			}
		}
		return items, v.rev, more
	}
	start := &Placement{Key: q.After}
	if q.Namespace != "" && cmp.Less(q.After.Namespace, q.Namespace) {
		start = &Placement{Key: Key{Namespace: q.Namespace}}
	}
	v.placements.AscendGreaterOrEqual(start, func(p *Placement) bool {
		if q.Namespace != "" && p.Namespace > q.Namespace {
			return false
		}
		return take(p)
	})
	return items, v.rev, more
}

func sortKeys(ks []Key) { slices.SortFunc(ks, func(a, b Key) int { return a.compare(b) }) }

// Len returns how many nodes and placements readers see.
func (s *Scheduler) Len() (nodes, placements int) {
	s.v.mu.RLock()
	defer s.v.mu.RUnlock()
	return s.v.nodes.Len(), s.v.placements.Len()
}
