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
func (lb *LB) build(hosts []Host) *snapshot {
	c := lb.cfg
	n := uint32(len(hosts))
	s := &snapshot{gen: lb.gen, slots: n, live: len(hosts)}
	s.chunks = make([]*chunk, (n+chunkSize-1)/chunkSize)
	recs := make([]chunk, len(s.chunks))
	for i := range s.chunks {
		recs[i].gen = lb.gen
		s.chunks[i] = &recs[i]
	}
	b := label.NewPostingsBuilder(n)
	kh := make([]int, len(c.keys))
	for i, k := range c.keys {
		kh[i] = b.Key(k)
	}
	for i := range hosts {
		h := &hosts[i]
		s.chunks[i/chunkSize].recs[i%chunkSize] = slotRec{host: h, weight: h.Weight, healthy: true}
		for ki, k := range c.keys {
			if v, ok := h.Labels[k]; ok {
				b.AppendSlot(kh[ki], v, uint32(i))
			} else if c.listAny && len(h.Lists) > 0 {
				for _, v := range h.Lists[k] {
					b.AppendSlot(kh[ki], v, uint32(i))
				}
			}
		}
	}
	s.index = b.Build()
	en := enumerator{lb: lb, s: s}
	for si := range c.sels {
		en.selector(si)
	}
	s.table = newTable(en.out, lb.gen)
	s.any = &entry{gen: lb.gen, sel: selAny}
	s.def = &entry{gen: lb.gen, sel: selDefault}
	return s
}

// enumerator walks one selector's keys depth first, keeping at each depth
// the slots that have the values chosen so far: a dense bitset while large,
// a list once small.
type enumerator struct {
	lb    *LB
	s     *snapshot
	sel   *csel
	si    int
	vals  []string
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

func (en *enumerator) selector(si int) {
	en.si, en.sel = si, &en.lb.cfg.sels[si]
	d := len(en.sel.ids)
	for len(en.bits) < d {
		en.bits = append(en.bits, bitset.New(uint(en.s.slots)))
		en.lists = append(en.lists, nil)
	}
	en.vals = slices.Grow(en.vals[:0], d)[:d]
	en.walk(0, nil, nil)
}

// walk extends the current set (cur dense or curList; both nil at depth 0)
// by each value of the key at depth d that it meets.
func (en *enumerator) walk(d int, cur *bitset.BitSet, curList []uint32) {
	if d == len(en.sel.ids) {
		n := len(curList)
		if cur != nil {
			n = int(cur.Count())
		}
		en.emit(n)
		return
	}
	key := en.sel.names[d]
	ix := en.s.index
	if d > 0 && curList != nil && 4*len(curList) < ix.NumValues(key) {
		en.partition(d, key, curList)
		return
	}
	ix.Values(key, func(v string, p *label.Posting) bool {
		en.vals[d] = v
		switch {
		case d == 0:
			en.walk(1, p.Bits(), p.List())
		case cur != nil && p.Bits() != nil:
			nb := en.bits[d]
			cur.CopyFull(nb)
			nb.InPlaceIntersection(p.Bits())
			if nb.Any() {
				en.walk(d+1, nb, nil)
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
				en.walk(d+1, nil, l)
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
				en.walk(d+1, nil, l)
			}
		}
		return true
	})
}

// partition splits a set much smaller than key's number of values by each
// slot's own values, instead of trying every value of a high-cardinality key.
func (en *enumerator) partition(d int, key string, cur []uint32) {
	c := en.lb.cfg
	start := len(en.pairs)
	for _, s := range cur {
		en.vs = c.appendValues(en.vs[:0], en.s.rec(s).host, key)
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
		en.walk(d+1, nil, l)
		i = j
	}
	en.pairs = en.pairs[:start]
}

func (en *enumerator) emit(n int) {
	if len(en.slab) == 0 {
		en.slab = make([]entry, min(64, 8+len(en.out)))
	}
	e := &en.slab[0]
	en.slab = en.slab[1:]
	if len(en.strs) < len(en.vals) {
		en.strs = make([]string, min(64, 8+len(en.out))*len(en.vals))
	}
	vals := en.strs[:len(en.vals):len(en.vals)]
	en.strs = en.strs[len(en.vals):]
	copy(vals, en.vals)
	e.gen = en.lb.gen
	e.sel = int32(en.si)
	e.count = int32(n)
	e.values = vals
	e.hash = en.lb.hashValues(en.si, vals)
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
