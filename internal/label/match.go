package label

import (
	"slices"

	"github.com/bits-and-blooms/bitset"
)

// term is one requirement resolved against the index: the postings of the
// values it names (or of every value of its key, for k and !k).
type term struct {
	ps    []*Posting
	n     int            // slots over all ps
	union *bitset.BitSet // ps as one bitset, built on demand
}

func (t *term) contains(slot uint32) bool {
	if t.union != nil {
		return t.union.Test(uint(slot))
	}
	for _, p := range t.ps {
		if p.Contains(slot) {
			return true
		}
	}
	return false
}

// bits returns the term's slots as a bitset of at least n bits. A single
// dense posting is returned as is; do not modify the result.
func (t *term) bits(n uint) *bitset.BitSet {
	if t.union != nil {
		return t.union
	}
	if len(t.ps) == 1 && t.ps[0].bits != nil {
		return t.ps[0].bits
	}
	u := bitset.New(n)
	for _, p := range t.ps {
		if p.bits != nil {
			u.InPlaceUnion(p.bits)
			continue
		}
		for _, s := range p.list {
			u.Set(uint(s))
		}
	}
	t.union = u
	return u
}

func (ix *Postings) resolve(r Requirement) term {
	var t term
	add := func(p *Posting) {
		if p != nil {
			t.ps = append(t.ps, p)
			t.n += int(p.n)
		}
	}
	switch r.Op {
	case Equals, NotEquals, In, NotIn:
		for _, v := range r.Values {
			add(ix.Get(r.Key, v))
		}
	case Exists, NotExists:
		ix.Values(r.Key, func(_ string, p *Posting) bool { add(p); return true })
	}
	return t
}

// Match returns the slots of universe that satisfy sel, as a new bitset the
// caller owns. When the most selective positive term is sparse its slots are
// checked one by one; otherwise whole bitsets are intersected. Negative
// terms (!=, notin, !k) subtract, so absent keys match them as Kubernetes
// does.
func (ix *Postings) Match(sel Selector, universe *bitset.BitSet) *bitset.BitSet {
	n := max(universe.Len(), uint(ix.universe))
	var pos, neg []term
	for _, r := range sel {
		t := ix.resolve(r)
		switch r.Op {
		case Equals, In, Exists:
			if t.n == 0 {
				return bitset.New(n)
			}
			pos = append(pos, t)
		default:
			if t.n > 0 {
				neg = append(neg, t)
			}
		}
	}
	if len(pos) > 0 {
		slices.SortFunc(pos, func(a, b term) int { return a.n - b.n })
		if first := pos[0]; uint(first.n)*64 < n {
			out := bitset.New(n)
			for _, p := range first.ps {
				if p.bits != nil {
					for s, ok := p.bits.NextSet(0); ok; s, ok = p.bits.NextSet(s + 1) {
						matchSlot(out, uint32(s), universe, pos[1:], neg)
					}
					continue
				}
				for _, s := range p.list {
					matchSlot(out, s, universe, pos[1:], neg)
				}
			}
			return out
		}
	}
	out := universe.Clone()
	for i := range pos {
		out.InPlaceIntersection(pos[i].bits(n))
	}
	for i := range neg {
		out.InPlaceDifference(neg[i].bits(n))
	}
	return out
}

func matchSlot(out *bitset.BitSet, s uint32, universe *bitset.BitSet, pos, neg []term) {
	if !universe.Test(uint(s)) {
		return
	}
	for i := range pos {
		if !pos[i].contains(s) {
			return
		}
	}
	for i := range neg {
		if neg[i].contains(s) {
			return
		}
	}
	out.Set(uint(s))
}
