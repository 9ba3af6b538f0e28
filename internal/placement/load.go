package placement

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bits-and-blooms/bitset"

	"github.com/sextant-mesh/sextant/internal/label"
)

// Load replaces the whole state with these records (start-up, or a
// rebuild): nodes take slots in Seq order (name order among equal Seqs), a
// node with Seq 0 gets the next one. A placement on a missing node, or two
// records with one key, is an error and the state is left as it was.
func (s *Scheduler) Load(rev int64, nodes []*Node, placements []*Placement) error {
	// The readers' placement order is sorted on another core while the
	// engine is built (the two take about as long). Records read from the
	// store usually come in that order already.
	sorted := make(chan []*Placement, 1)
	go func() {
		byKey := func(a, b *Placement) int { return a.Key.compare(b.Key) }
		if slices.IsSortedFunc(placements, byKey) {
			sorted <- placements
			return
		}
		ps := slices.Clone(placements)
		slices.SortFunc(ps, byKey)
		sorted <- ps
	}()
	e, err := build(nodes, placements)
	ps := <-sorted
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e.pool = s.pool
	s.e = e
	s.v.reset(e, rev, ps)
	return nil
}

// LoadEncoded is Load from encoded records, decoded on every core.
func (s *Scheduler) LoadEncoded(rev int64, nodes, placements [][]byte) error {
	ns := make([]*Node, len(nodes))
	ps := make([]*Placement, len(placements))
	if err := parallel(len(nodes), func(i int) error {
		ns[i] = new(Node)
		return ns[i].UnmarshalBinary(nodes[i])
	}); err != nil {
		return fmt.Errorf("placement: load nodes: %w", err)
	}
	if err := parallel(len(placements), func(i int) error {
		ps[i] = new(Placement)
		return ps[i].UnmarshalBinary(placements[i])
	}); err != nil {
		return fmt.Errorf("placement: load placements: %w", err)
	}
	return s.Load(rev, ns, ps)
}

// parallel runs fn(0..n-1) on GOMAXPROCS goroutines that it waits for,
// and returns the first error.
func parallel(n int, fn func(i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), max(n/1024, 1))
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				const chunk = 256
				lo := int(next.Add(chunk)) - chunk
				if lo >= n || first.Load() != nil {
					return
				}
				for i := lo; i < min(lo+chunk, n); i++ {
					if err := fn(i); err != nil {
						first.CompareAndSwap(nil, &err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// build makes an engine from records in one pass per structure: the label
// index in bulk, resources summed per node.
func build(nodes []*Node, placements []*Placement) (*engine, error) {
	e := newEngine()
	e.bulk = true
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b *Node) int {
		if (a.Seq == 0) != (b.Seq == 0) { // unsequenced nodes go last
			if a.Seq == 0 {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	n := len(sorted)
	e.nodes = make([]*Node, n)
	e.res = make([]nodeRes, n)
	e.nodeTaints = make([][]int32, n)
	e.onNode = make([][]*Placement, n)
	e.live = bitset.New(uint(n))
	e.unsched = bitset.New(uint(n))
	e.byName = make(map[string]uint32, n)
	lb := label.NewPostingsBuilder(uint32(n))
	handles := map[string]int{}
	for i, nd := range sorted {
		if nd.Seq == 0 {
			c := *nd
			c.Seq = e.nextSeq
			nd = &c
		}
		if _, dup := e.byName[nd.Name]; dup {
			return nil, fmt.Errorf("%w: node %s stored twice", ErrCorrupt, nd.Name)
		}
		if nd.Seq >= e.nextSeq {
			e.nextSeq = nd.Seq + 1
		}
		slot := uint32(i)
		e.nodes[i] = nd
		e.byName[nd.Name] = slot
		e.live.Set(uint(slot))
		e.nlive++
		e.unsched.SetTo(uint(slot), nd.Unschedulable)
		for k, v := range nd.Labels.All() {
			h, ok := handles[k]
			if !ok {
				h = lb.Key(k)
				handles[k] = h
			}
			lb.AppendSlot(h, v, slot)
		}
		e.setTaints(slot, nd.Taints)
		r := &e.res[slot]
		r.allocCPU, r.allocMem, r.allocEph, r.allocPods = nd.Allocatable.CPU, nd.Allocatable.Memory, nd.Allocatable.EphemeralStorage, nd.Pods
		for _, sc := range nd.Allocatable.Scalars {
			e.scalar(sc.Name).alloc[slot] = sc.Value
		}
	}
	e.labels = lb.Build()
	e.placements = make(map[Key]*Placement, len(placements))
	// Maps sized up front: growing a map of half a million entries
	// rehashes it a dozen times.
	perNS := map[string]int{}
	for _, p := range placements {
		perNS[p.Namespace]++
	}
	for ns, n := range perNS {
		e.byNS[ns] = make(map[string]*Placement, n)
	}
	for _, p := range placements {
		slot, ok := e.byName[p.Node]
		if !ok {
			return nil, fmt.Errorf("%w: placement %s on missing node %s", ErrCorrupt, p.Key, p.Node)
		}
		n := len(e.placements)
		e.addPlacement(p, slot)
		if len(e.placements) == n { // the engine is dropped on this error
			return nil, fmt.Errorf("%w: placement %s stored twice", ErrCorrupt, p.Key)
		}
	}
	e.bulk = false
	for slot := range e.nodes {
		e.rebucket(uint32(slot))
	}
	return e, nil
}

// needsCompaction reports whether deleted slots outnumber live ones.
func (e *engine) needsCompaction() bool {
	dead := len(e.nodes) - e.nlive
	return dead > 1024 && dead > e.nlive
}

// rebuild renumbers slots densely (same order) and republishes. Writer only.
func (s *Scheduler) rebuild(rev int64) {
	old := s.e
	nodes := make([]*Node, 0, old.nlive)
	for _, n := range old.nodes {
		if n != nil {
			nodes = append(nodes, n)
		}
	}
	ps := make([]*Placement, 0, len(old.placements))
	for _, p := range old.placements {
		ps = append(ps, p)
	}
	e, err := build(nodes, ps)
	if err != nil { // cannot happen: the records came from a consistent state
		s.log.Error("placement: rebuild failed; keeping slots as they are", "err", err)
		s.v.reset(old, rev, nil)
		return
	}
	e.pool = s.pool
	s.e = e
	s.v.reset(e, rev, nil)
}
