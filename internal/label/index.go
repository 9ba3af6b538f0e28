package label

import (
	"iter"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
)

// Index is a bitmap inverted index: for every key, the set of slots having
// it, and for every value of the key, the set of slots having that value.
//
// An Index is owned by one writer. Once it is shared with readers it must not
// change; the writer derives the next version with Edit, which shares every
// bitmap and clones only those it then changes (copy-on-write).
type Index struct {
	gen  uint64
	keys map[string]*keyEntry
}

type keyEntry struct {
	gen    uint64
	any    posting
	values map[string]posting
}

// posting is a bitmap tagged with the generation of the Index that may
// change it in place; any other generation must clone it first.
type posting struct {
	gen uint64
	bm  *roaring.Bitmap
}

var generations atomic.Uint64

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{gen: generations.Add(1), keys: make(map[string]*keyEntry)}
}

// Edit returns a new version of the index that shares all storage with ix.
// ix stays valid and unchanged for its readers. Cost: one map of keys.
func (ix *Index) Edit() *Index {
	n := &Index{gen: generations.Add(1), keys: make(map[string]*keyEntry, len(ix.keys))}
	for k, e := range ix.keys {
		n.keys[k] = e
	}
	return n
}

func (ix *Index) entry(key string) *keyEntry {
	e := ix.keys[key]
	switch {
	case e == nil:
		e = &keyEntry{gen: ix.gen, any: posting{ix.gen, roaring.New()}, values: make(map[string]posting)}
		ix.keys[key] = e
	case e.gen != ix.gen:
		c := &keyEntry{gen: ix.gen, any: e.any, values: make(map[string]posting, len(e.values))}
		for v, p := range e.values {
			c.values[v] = p
		}
		e = c
		ix.keys[key] = e
	}
	return e
}

func (ix *Index) own(p posting) posting {
	if p.gen != ix.gen {
		p = posting{ix.gen, p.bm.Clone()}
	}
	return p
}

// Add records that slot has value under key.
func (ix *Index) Add(slot uint32, key, value string) {
	e := ix.entry(key)
	e.any = ix.own(e.any)
	e.any.bm.Add(slot)
	p, ok := e.values[value]
	if !ok {
		p = posting{ix.gen, roaring.New()}
	} else {
		p = ix.own(p)
	}
	p.bm.Add(slot)
	e.values[value] = p
}

// AddSorted records that every slot of the ascending slots has value under
// key; it is the fast path for bulk builds.
func (ix *Index) AddSorted(slots []uint32, key, value string) {
	if len(slots) == 0 {
		return
	}
	e := ix.entry(key)
	e.any = ix.own(e.any)
	e.any.bm.AddMany(slots)
	p, ok := e.values[value]
	if !ok {
		p = posting{ix.gen, roaring.New()}
	} else {
		p = ix.own(p)
	}
	p.bm.AddMany(slots)
	e.values[value] = p
}

// Remove forgets that slot has value under key, and drops slot from the
// key's set. A slot with several values under one key (a list) is updated by
// removing all of its old pairs and adding the new ones.
func (ix *Index) Remove(slot uint32, key, value string) {
	e0 := ix.keys[key]
	if e0 == nil || !e0.any.bm.Contains(slot) {
		return
	}
	e := ix.entry(key)
	if p, ok := e.values[value]; ok && p.bm.Contains(slot) {
		p = ix.own(p)
		p.bm.Remove(slot)
		if p.bm.IsEmpty() {
			delete(e.values, value)
		} else {
			e.values[value] = p
		}
	}
	e.any = ix.own(e.any)
	e.any.bm.Remove(slot)
	if e.any.bm.IsEmpty() {
		delete(ix.keys, key)
	}
}

// Get returns the slots having value under key, or nil. Do not modify it.
func (ix *Index) Get(key, value string) *roaring.Bitmap {
	if e := ix.keys[key]; e != nil {
		if p, ok := e.values[value]; ok {
			return p.bm
		}
	}
	return nil
}

// Has returns the slots having key under any value, or nil. Do not modify it.
func (ix *Index) Has(key string) *roaring.Bitmap {
	if e := ix.keys[key]; e != nil {
		return e.any.bm
	}
	return nil
}

// Keys yields every key with at least one slot, in no order.
func (ix *Index) Keys() iter.Seq[string] {
	return func(yield func(string) bool) {
		for k := range ix.keys {
			if !yield(k) {
				return
			}
		}
	}
}

// Values yields every value of key with the slots having it, in no order.
// Do not modify the bitmaps.
func (ix *Index) Values(key string) iter.Seq2[string, *roaring.Bitmap] {
	return func(yield func(string, *roaring.Bitmap) bool) {
		e := ix.keys[key]
		if e == nil {
			return
		}
		for v, p := range e.values {
			if !yield(v, p.bm) {
				return
			}
		}
	}
}

// NumValues returns how many distinct values key has.
func (ix *Index) NumValues(key string) int {
	if e := ix.keys[key]; e != nil {
		return len(e.values)
	}
	return 0
}

// Match returns the slots of universe that satisfy sel, as a new bitmap the
// caller owns. Positive terms are intersected smallest first; negative terms
// (!=, notin, !k) subtract, so absent keys match them as Kubernetes does.
func (ix *Index) Match(sel Selector, universe *roaring.Bitmap) *roaring.Bitmap {
	var out *roaring.Bitmap
	// Positive terms first: they shrink the set fastest.
	for _, r := range sel {
		var pos *roaring.Bitmap
		switch r.Op {
		case Equals:
			pos = ix.Get(r.Key, r.Values[0])
		case In:
			var parts []*roaring.Bitmap
			for _, v := range r.Values {
				if b := ix.Get(r.Key, v); b != nil {
					parts = append(parts, b)
				}
			}
			if len(parts) > 0 {
				pos = roaring.FastOr(parts...)
			}
		case Exists:
			pos = ix.Has(r.Key)
		default:
			continue
		}
		if pos == nil {
			return roaring.New()
		}
		if out == nil {
			out = roaring.And(universe, pos)
		} else {
			out.And(pos)
		}
		if out.IsEmpty() {
			return out
		}
	}
	if out == nil {
		out = universe.Clone()
	}
	for _, r := range sel {
		switch r.Op {
		case NotEquals:
			if b := ix.Get(r.Key, r.Values[0]); b != nil {
				out.AndNot(b)
			}
		case NotIn:
			for _, v := range r.Values {
				if b := ix.Get(r.Key, v); b != nil {
					out.AndNot(b)
				}
			}
		case NotExists:
			if b := ix.Has(r.Key); b != nil {
				out.AndNot(b)
			}
		}
	}
	return out
}
