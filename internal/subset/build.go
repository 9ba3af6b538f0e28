package subset

import (
	"math/bits"
	"slices"

	"github.com/bits-and-blooms/bitset"
	"github.com/sextant-mesh/sextant/internal/label"
)

// table holds the selector subsets, sharded by hash so that an update copies
// only the shards it touches.
type table struct {
	shards [][]*entry
	gens   []uint64 // shards[i] may be changed in place by the edit of gens[i]
	n      int
}

func (t *table) shard(h uint64) []*entry { return t.shards[h&uint64(len(t.shards)-1)] }

func newTable(entries []*entry, gen uint64) table {
	n := 8
	for n*4 < len(entries) && n < 1<<16 {
		n *= 2
	}
	t := table{shards: make([][]*entry, n), gens: make([]uint64, n), n: len(entries)}
	counts := make([]int32, n)
	for _, e := range entries {
		counts[e.hash&uint64(n-1)]++
	}
	backing := make([]*entry, len(entries))
	off := 0
	for i, c := range counts {
		t.shards[i] = backing[off : off : off+int(c)]
		t.gens[i] = gen
		off += int(c)
	}
	for _, e := range entries {
		i := e.hash & uint64(n-1)
		t.shards[i] = append(t.shards[i], e)
	}
	return t
}

// build makes the first snapshot: the inverted index in one pass over the
// hosts, then, per selector, only the value combinations that co-occur, by
// intersecting postings (never the Cartesian product of values).
func (lb *LB) build(hosts []Host) (*snapshot, error) {
	n := uint32(len(hosts))
	s := &snapshot{gen: lb.gen, slots: n, live: len(hosts)}
	s.chunks = make([]*chunk, (n+chunkSize-1)/chunkSize)
	chunks := make([]chunk, len(s.chunks))
	for i := range s.chunks {
		chunks[i] = chunk{gen: lb.gen, base: hosts[i*chunkSize : min((i+1)*chunkSize, len(hosts))]}
		s.chunks[i] = &chunks[i]
	}
	var err error
	if s.index, err = lb.index(hosts); err != nil {
		return nil, err
	}
	en := enumerator{lb: lb, s: s}
	en.walkAll()
	s.table = newTable(en.out, lb.gen)
	s.any = &entry{gen: lb.gen, sel: selAny}
	s.def = &entry{gen: lb.gen, sel: selDefault}
	return s, nil
}

// enumerator walks the selectors' trie (compiled.trie) depth first, keeping
// at each depth the slots that have the values chosen so far: a dense bitset
// while large, a list once small. Selectors sharing a key prefix share its
// intersections.
type enumerator struct {
	lb    *LB
	s     *snapshot
	vals  []string         // the values chosen, by depth
	byKey [][]valPosting   // by key id, see values
	bits  []*bitset.BitSet // scratch per depth
	lists [][]uint32       // scratch per depth
	out   []*entry
	slab  []entry
	strs  []string
	pairs []valSlot
	vs    []string
}

type valSlot struct {
	v    string
	slot uint32
}

type valPosting struct {
	v string
	p *label.Posting
}

// values lists key's values and postings once per build: the walk goes over
// them many times, a slice beats iterating the index's map.
func (en *enumerator) values(node *trieNode) []valPosting {
	if vs := en.byKey[node.key]; vs != nil {
		return vs
	}
	vs := make([]valPosting, 0, en.s.index.NumValues(node.name))
	en.s.index.Values(node.name, func(v string, p *label.Posting) bool {
		vs = append(vs, valPosting{v, p})
		return true
	})
	en.byKey[node.key] = vs
	return vs
}

// walkAll enumerates every selector's non-empty subsets into en.out.
func (en *enumerator) walkAll() {
	c := en.lb.cfg
	for len(en.bits) < c.depth {
		en.bits = append(en.bits, bitset.New(uint(en.s.slots)))
		en.lists = append(en.lists, nil)
	}
	en.vals = make([]string, c.depth)
	en.byKey = make([][]valPosting, len(c.keys))
	for _, n := range c.trie {
		en.walk(n, 0, nil, nil)
	}
}

// walk tries each value of node's key, at depth d, on the current set (cur
// dense or curList; both nil at depth 0) and goes on with each non-empty
// result.
func (en *enumerator) walk(node *trieNode, d int, cur *bitset.BitSet, curList []uint32) {
	values := en.values(node)
	if d > 0 && curList != nil && 4*len(curList) < len(values) {
		en.partition(node, d, curList)
		return
	}
	leaf := len(node.children) == 0
	for _, vp := range values {
		v, p := vp.v, vp.p
		en.vals[d] = v
		switch {
		case d == 0:
			en.reached(node, d, p.Bits(), p.List(), p.Len())
		case cur != nil && p.Bits() != nil && leaf:
			// Only the count is needed, not the set.
			if n := cur.IntersectionCardinality(p.Bits()); n > 0 {
				en.emit(node.sel, d+1, int(n))
			}
		case cur != nil && p.Bits() != nil:
			nb := en.bits[d]
			cur.CopyFull(nb)
			nb.InPlaceIntersection(p.Bits())
			if node.sel < 0 {
				if nb.Any() {
					en.reached(node, d, nb, nil, 0)
				}
			} else if n := nb.Count(); n > 0 {
				en.reached(node, d, nb, nil, int(n))
			}
		case cur != nil:
			l := en.lists[d][:0]
			for _, s := range p.List() {
				if cur.Test(uint(s)) {
					l = append(l, s)
				}
			}
			en.lists[d] = l
			if len(l) > 0 {
				en.reached(node, d, nil, l, len(l))
			}
		default:
			l := en.lists[d][:0]
			for _, s := range curList {
				if p.Contains(s) {
					l = append(l, s)
				}
			}
			en.lists[d] = l
			if len(l) > 0 {
				en.reached(node, d, nil, l, len(l))
			}
		}
	}
}

// reached: the n slots of bits or list have the values en.vals[:d+1]. They
// are the subset of the selector ending at node, if any, and the set its
// children extend.
func (en *enumerator) reached(node *trieNode, d int, bits *bitset.BitSet, list []uint32, n int) {
	if node.sel >= 0 {
		en.emit(node.sel, d+1, n)
	}
	for _, ch := range node.children {
		en.walk(ch, d+1, bits, list)
	}
}

// partition splits a set much smaller than the number of values of node's
// key by each slot's own values, instead of trying every value of a
// high-cardinality key.
func (en *enumerator) partition(node *trieNode, d int, cur []uint32) {
	c := en.lb.cfg
	start := len(en.pairs)
	for _, s := range cur {
		en.vs = c.appendValues(en.vs[:0], en.s.rec(s).host, node.name)
		for _, v := range en.vs {
			en.pairs = append(en.pairs, valSlot{v, s})
		}
	}
	ps := en.pairs[start:]
	slices.SortFunc(ps, func(a, b valSlot) int {
		if a.v != b.v {
			if a.v < b.v {
				return -1
			}
			return 1
		}
		return int(a.slot) - int(b.slot)
	})
	for i := 0; i < len(ps); {
		j := i
		l := en.lists[d][:0]
		for ; j < len(ps) && ps[j].v == ps[i].v; j++ {
			if len(l) == 0 || l[len(l)-1] != ps[j].slot {
				l = append(l, ps[j].slot)
			}
		}
		en.lists[d] = l
		en.vals[d] = ps[i].v
		en.reached(node, d, nil, l, len(l))
		i = j
	}
	en.pairs = en.pairs[:start]
}

// emit records the subset of selector si with values en.vals[:depth] and n
// members.
func (en *enumerator) emit(si, depth, n int) {
	if len(en.slab) == 0 {
		en.slab = make([]entry, min(64, 8+len(en.out)))
	}
	e := &en.slab[0]
	en.slab = en.slab[1:]
	if len(en.strs) < depth {
		en.strs = make([]string, min(64, 8+len(en.out))*en.lb.cfg.depth)
	}
	vals := en.strs[:depth:depth]
	en.strs = en.strs[depth:]
	copy(vals, en.vals)
	e.gen = en.lb.gen
	e.sel = int32(si)
	e.count = int32(n)
	e.values = vals
	e.hash = en.lb.hashValues(si, vals)
	en.out = append(en.out, e)
}

// members returns the ascending slots of e's subset in s.
func (s *snapshot) members(c *compiled, e *entry) []uint32 {
	var keys, vals []string
	switch e.sel {
	case selAny:
	case selDefault:
		keys, vals = c.defKeys, c.defVals
	default:
		keys, vals = c.sels[e.sel].names, e.values
	}
	if len(keys) == 0 {
		out := make([]uint32, 0, s.live)
		for slot := uint32(0); slot < s.slots; slot++ {
			if s.rec(slot).host != nil {
				out = append(out, slot)
			}
		}
		return out
	}
	ps := make([]*label.Posting, len(keys))
	for i := range keys {
		ps[i] = s.index.Get(keys[i], vals[i])
		if ps[i] == nil {
			return nil
		}
	}
	slices.SortFunc(ps, func(a, b *label.Posting) int { return a.Len() - b.Len() })
	var acc *bitset.BitSet
	var list []uint32
	if b := ps[0].Bits(); b != nil {
		acc = b.Clone()
	} else {
		list = slices.Clone(ps[0].List())
	}
	for _, p := range ps[1:] {
		switch {
		case acc != nil && p.Bits() != nil:
			acc.InPlaceIntersection(p.Bits())
		case acc != nil:
			l := make([]uint32, 0, p.Len())
			for _, x := range p.List() {
				if acc.Test(uint(x)) {
					l = append(l, x)
				}
			}
			acc, list = nil, l
		default:
			l := list[:0]
			for _, x := range list {
				if p.Contains(x) {
					l = append(l, x)
				}
			}
			list = l
		}
	}
	if acc != nil {
		list = make([]uint32, 0, acc.Count())
		words := acc.Words()
		for wi, w := range words {
			for w != 0 {
				list = append(list, uint32(wi*64+bits.TrailingZeros64(w)))
				w &= w - 1
			}
		}
	}
	return list
}
