package label

import (
	"maps"
	"slices"
	"sync/atomic"

	"github.com/bits-and-blooms/bitset"
)

// Postings is the project's inverted index (key -> value -> set of slots),
// used by the registry catalog and the subset load balancer. A value's slots
// are a dense bitset once they cover at least 1/32 of the slots (where a
// bitset is no larger than a list), and a sorted list below that, so a key
// with thousands of rare values stays small while low-cardinality postings
// intersect at memory speed (80x roaring on the subset build; see
// docs/perf/subset.md).
//
// A Postings is owned by one writer and must not change once shared; Edit
// derives the next version, copying only what it then changes.
//
// A posting that only grows past its end is not copied: the next version
// appends (list elements, bitset words) into the same array past the end
// older versions see (they never read there), and marks the shared part
// frozen. That is safe only along one line
// of versions, so an index edited twice (a branch) and all its descendants
// copy instead.
type Postings struct {
	gen      uint64
	universe uint32 // slots are below it; decides dense vs list
	keys     map[string]*postingKey
	append   bool // may append into lists shared with older versions
	edited   bool // Edit was called: a second Edit is a branch
	// recent are the keys of the last AddLabels by position, with their
	// entries of this version (forgotten when a key is removed).
	recent [16]struct {
		key string
		e   *postingKey
	}
}

// postingKey is one key's values. A key with many values (an instance
// name, an address) keeps two maps, so that a version changing a few of
// them need not copy all: base, shared with other versions and never
// written, and values, this version's own, holding what changed since base
// (nil for a value removed). Lookups try values, then base. When values
// grows past an eighth of base (or at split values with no base), the next
// version merges them into one map of its own: an edit copies about ten
// entries per value changed, where one map copied every value per version
// (docs/registry.md).
type postingKey struct {
	gen    uint64
	values map[string]*Posting
	base   map[string]*Posting
	n      int // live values
}

// splitValues is how many values a key holds in one map before versions
// share them as a base.
const splitValues = 1024

func (e *postingKey) get(value string) *Posting {
	if p, ok := e.values[value]; ok || e.base == nil {
		return p
	}
	return e.base[value]
}

// next is e for a new version gen: a copy of what it may change.
func (e *postingKey) next(gen uint64) *postingKey {
	switch {
	case e.base == nil && len(e.values) < splitValues:
		// maps.Clone copies the map's tables as they are; inserting each
		// value into a new map rehashed every one of them.
		return &postingKey{gen: gen, values: maps.Clone(e.values), n: e.n}
	case e.base == nil:
		return &postingKey{gen: gen, values: make(map[string]*Posting), base: e.values, n: e.n}
	case len(e.values) <= len(e.base)/8:
		return &postingKey{gen: gen, values: maps.Clone(e.values), base: e.base, n: e.n}
	}
	m := maps.Clone(e.base)
	for v, p := range e.values {
		if p == nil {
			delete(m, v)
		} else {
			m[v] = p
		}
	}
	return &postingKey{gen: gen, values: m, n: e.n}
}

// drop forgets value, whose posting is empty.
func (e *postingKey) drop(value string) {
	if e.base[value] != nil {
		e.values[value] = nil
	} else {
		delete(e.values, value)
	}
	e.n--
}

// Posting is the set of slots having one value. Do not modify it.
type Posting struct {
	gen  uint64
	bits *bitset.BitSet // dense form, or nil
	list []uint32       // ascending, when bits == nil
	n    uint32
	// frozen is how much of list (elements) or bits (words) is shared with
	// older versions: never written in place.
	frozen uint32
}

// Len returns the number of slots.
func (p *Posting) Len() int {
	if p == nil {
		return 0
	}
	return int(p.n)
}

// Bits returns the dense form, or nil when the posting is a list.
func (p *Posting) Bits() *bitset.BitSet { return p.bits }

// List returns the ascending slots when the posting is not dense, else nil.
func (p *Posting) List() []uint32 { return p.list }

// Contains reports whether slot is in the posting.
func (p *Posting) Contains(slot uint32) bool {
	if p == nil {
		return false
	}
	if p.bits != nil {
		return p.bits.Test(uint(slot))
	}
	_, ok := slices.BinarySearch(p.list, slot)
	return ok
}

// denseAt is the size at which a list becomes a bitset: 32 bits per slot in a
// list against universe bits for the bitset.
func denseAt(universe uint32) int { return int(universe/32) + 1 }

func (p *Posting) add(slot uint32, universe uint32) {
	if p.bits != nil {
		if !p.bits.Test(uint(slot)) {
			if slot>>6 < p.frozen {
				p.own()
			}
			p.bits.Set(uint(slot))
			p.n++
		}
		return
	}
	i, ok := len(p.list), false
	if i > 0 && p.list[i-1] >= slot {
		if i, ok = slices.BinarySearch(p.list, slot); ok {
			return
		}
		if i < int(p.frozen) {
			p.own()
		}
	}
	p.list = slices.Insert(p.list, i, slot)
	p.n++
	if len(p.list) >= denseAt(universe) {
		p.densify(universe)
	}
}

// own gives the posting storage of its own, unfrozen.
func (p *Posting) own() {
	if p.bits != nil {
		p.bits = CloneBits(p.bits)
	} else {
		p.list = slices.Clone(p.list)
	}
	p.frozen = 0
}

func (p *Posting) densify(universe uint32) {
	b := bitset.New(uint(universe))
	for _, s := range p.list {
		b.Set(uint(s))
	}
	p.bits, p.list, p.frozen = b, nil, 0
}

func (p *Posting) remove(slot uint32) {
	if p.bits != nil {
		if p.bits.Test(uint(slot)) {
			if slot>>6 < p.frozen {
				p.own()
			}
			p.bits.Clear(uint(slot))
			p.n--
		}
		return
	}
	if i, ok := slices.BinarySearch(p.list, slot); ok {
		if i < int(p.frozen) {
			p.own()
		}
		p.list = slices.Delete(p.list, i, i+1)
		p.n--
	}
}

func (p *Posting) clone(gen uint64) *Posting {
	c := &Posting{gen: gen, n: p.n}
	if p.bits != nil {
		c.bits = CloneBits(p.bits)
	} else {
		c.list = slices.Clone(p.list)
	}
	return c
}

// CloneBits copies b with room to grow by an eighth: bitset's Clone leaves
// none, so the first bit set past the end (a new slot) would copy it again
// into twice the size.
func CloneBits(b *bitset.BitSet) *bitset.BitSet {
	w := b.Words()
	c := make([]uint64, len(w), len(w)+len(w)/8+1)
	copy(c, w)
	return bitset.FromWithLength(b.Len(), c)
}

// extend is clone for a version that will add slot: when the index may
// append (see Postings), a list whose last slot is below slot, or a bitset
// whose words all lie below slot's word, is shared and frozen instead.
func (p *Posting) extend(gen uint64, slot uint32, share bool) *Posting {
	if share {
		switch {
		case p.bits != nil && int(slot>>6) >= len(p.bits.Words()):
			w := p.bits.Words()
			return &Posting{gen: gen, n: p.n, bits: bitset.FromWithLength(p.bits.Len(), w), frozen: uint32(len(w))}
		case p.bits == nil && (len(p.list) == 0 || p.list[len(p.list)-1] < slot):
			return &Posting{gen: gen, n: p.n, list: p.list, frozen: uint32(len(p.list))}
		}
	}
	return p.clone(gen)
}

// generations tags each version of an index, so an edit knows which
// postings it may change in place.
var generations atomic.Uint64

// NewPostings returns an empty index for slots below universe (a hint: slots
// at or above it are accepted and grow it).
func NewPostings(universe uint32) *Postings {
	return &Postings{gen: generations.Add(1), universe: universe, keys: make(map[string]*postingKey), append: true}
}

// Edit returns a new version sharing all storage with ix, which stays valid
// and unchanged for its readers. Cost: one map of keys.
func (ix *Postings) Edit() *Postings {
	n := &Postings{gen: generations.Add(1), universe: ix.universe, keys: maps.Clone(ix.keys),
		append: ix.append && !ix.edited}
	ix.edited = true
	return n
}

// Universe returns the bound below which every slot lies.
func (ix *Postings) Universe() uint32 { return ix.universe }

func (ix *Postings) key(k string) *postingKey {
	e := ix.keys[k]
	switch {
	case e == nil:
		e = &postingKey{gen: ix.gen, values: make(map[string]*Posting)}
		ix.keys[k] = e
	case e.gen != ix.gen:
		e = e.next(ix.gen)
		ix.keys[k] = e
	}
	return e
}

// Add records that slot has value under key.
func (ix *Postings) Add(slot uint32, key, value string) {
	ix.addTo(ix.key(key), slot, value)
}

// AddLabels is Add for every pair of l. Items mostly share their keys, so
// the key at each position is remembered from the last call and compared
// instead of looked up.
func (ix *Postings) AddLabels(slot uint32, l Labels) {
	for j := range l.Len() {
		k, v := l.At(j)
		ix.addTo(ix.keyAt(j, k), slot, v)
	}
}

// keyAt is key(k) for the key at position j of a set, remembered from the
// last set added at that position.
func (ix *Postings) keyAt(j int, k string) *postingKey {
	if j >= len(ix.recent) {
		return ix.key(k)
	}
	r := &ix.recent[j]
	if r.e == nil || r.key != k {
		r.key, r.e = k, ix.key(k)
	}
	return r.e
}

func (ix *Postings) addTo(e *postingKey, slot uint32, value string) *Posting {
	if slot >= ix.universe {
		ix.universe = slot + 1
	}
	p := e.get(value)
	switch {
	case p == nil:
		p = &Posting{gen: ix.gen}
		e.values[value] = p
		e.n++
	case p.gen != ix.gen:
		p = p.extend(ix.gen, slot, ix.append)
		e.values[value] = p
	}
	p.add(slot, ix.universe)
	return p
}

// Remove forgets that slot has value under key.
func (ix *Postings) Remove(slot uint32, key, value string) {
	e0 := ix.keys[key]
	if e0 == nil || !e0.get(value).Contains(slot) {
		return
	}
	e := ix.key(key)
	p := e.get(value)
	if p.gen != ix.gen {
		p = p.clone(ix.gen)
		e.values[value] = p
	}
	p.remove(slot)
	if p.n == 0 {
		e.drop(value)
		if e.n == 0 {
			delete(ix.keys, key)
			clear(ix.recent[:])
		}
	}
}

// Get returns the slots having value under key, or nil.
func (ix *Postings) Get(key, value string) *Posting {
	if e := ix.keys[key]; e != nil {
		return e.get(value)
	}
	return nil
}

// NumValues returns how many distinct values key has.
func (ix *Postings) NumValues(key string) int {
	if e := ix.keys[key]; e != nil {
		return e.n
	}
	return 0
}

// Values calls fn for every value of key with its posting, in no order,
// until fn returns false.
func (ix *Postings) Values(key string, fn func(value string, p *Posting) bool) {
	e := ix.keys[key]
	if e == nil {
		return
	}
	for v, p := range e.values {
		if p != nil && !fn(v, p) {
			return
		}
	}
	for v, p := range e.base {
		if _, changed := e.values[v]; !changed && !fn(v, p) {
			return
		}
	}
}

// PostingsBuilder builds a Postings in bulk, faster than one Add per pair:
// values are found by a short linear scan while a key has few of them, and
// slots are appended, not inserted. Use one builder once.
type PostingsBuilder struct {
	ix   *Postings
	keys []builderKey
	hint int // map size for a key that passes scanValues values
}

type builderKey struct {
	e        *postingKey
	presized bool       // values map made for hint entries
	names    []string   // values in order of appearance; scanned while few
	ps       []*Posting // postings of names
}

// scanValues is how many values a key may have before lookups use its map;
// below it a scan of short strings beats hashing.
const scanValues = 8

// NewPostingsBuilder starts a build for slots below universe.
func NewPostingsBuilder(universe uint32) *PostingsBuilder {
	return &PostingsBuilder{ix: NewPostings(universe), hint: int(universe / 4)}
}

// Key returns the handle of key for AppendSlot.
func (b *PostingsBuilder) Key(key string) int {
	if e := b.ix.keys[key]; e != nil {
		for i := range b.keys {
			if b.keys[i].e == e {
				return i
			}
		}
	}
	e := b.ix.key(key)
	b.keys = append(b.keys, builderKey{e: e})
	return len(b.keys) - 1
}

// AppendSlot records that slot has value under the key of handle k. Slots
// must come in ascending order per (key, value); a repeated slot is ignored.
func (b *PostingsBuilder) AppendSlot(k int, value string, slot uint32) {
	bk := &b.keys[k]
	var p *Posting
	if len(bk.ps) <= scanValues {
		for i, n := range bk.names {
			if n == value {
				p = bk.ps[i]
				break
			}
		}
	} else {
		p = bk.e.values[value]
	}
	if p == nil {
		p = b.newValue(bk, value)
	}
	if slot >= b.ix.universe {
		b.ix.universe = slot + 1
	}
	if p.bits != nil {
		// The builder owns the bitset: set the bit in its words directly.
		if w := p.bits.Words(); int(slot>>6) < len(w) {
			if m := uint64(1) << (slot & 63); w[slot>>6]&m == 0 {
				w[slot>>6] |= m
				p.n++
			}
			return
		}
		p.add(slot, b.ix.universe)
		return
	}
	if l := len(p.list); l > 0 && p.list[l-1] >= slot {
		if p.list[l-1] == slot {
			return
		}
		p.add(slot, b.ix.universe) // out of order: keep it correct anyway
		return
	}
	if p.list == nil {
		p.list = make([]uint32, 0, 2) // most values of a high-cardinality key have one slot
	}
	p.list = append(p.list, slot)
	p.n++
	if len(p.list) >= denseAt(b.ix.universe) {
		p.densify(b.ix.universe)
	}
}

// newValue adds an empty posting for value, new to the key of bk.
func (b *PostingsBuilder) newValue(bk *builderKey, value string) *Posting {
	p := &Posting{gen: b.ix.gen}
	if len(bk.ps) <= scanValues { // past that the map alone is used
		bk.ps = append(bk.ps, p)
		bk.names = append(bk.names, value)
		if len(bk.ps) > scanValues && b.hint > scanValues {
			// A key with many values: size its map once instead of
			// growing it step by step; Build shrinks it if it stays small.
			m := make(map[string]*Posting, b.hint)
			for v, q := range bk.e.values {
				m[v] = q
			}
			bk.e.values = m
			bk.presized = true
		}
	}
	bk.e.values[value] = p
	bk.e.n++
	return p
}

// Build returns the index. The builder must not be used afterwards.
func (b *PostingsBuilder) Build() *Postings {
	for k, e := range b.ix.keys {
		if len(e.values) == 0 {
			delete(b.ix.keys, k)
		}
	}
	for i := range b.keys {
		// A map sized for many values that got few is copied to its size:
		// maps never shrink, and the index lives long.
		if bk := &b.keys[i]; bk.presized && len(bk.e.values) < b.hint/4 {
			m := make(map[string]*Posting, len(bk.e.values))
			for v, q := range bk.e.values {
				m[v] = q
			}
			bk.e.values = m
		}
	}
	return b.ix
}
