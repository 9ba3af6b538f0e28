package catalog

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/bits-and-blooms/bitset"

	"github.com/sextant-mesh/sextant/internal/label"
)

// Item is a labelled record a Set can index: instances today, nodes next.
// Items are immutable once in a set; a change is a new item.
type Item interface {
	comparable
	// ItemID is the item's unique id within its set.
	ItemID() string
	// ItemLabels are the labels selectors match.
	ItemLabels() label.Labels
	// ItemReady puts the item in the ready subset (healthy and not
	// isolated, for an instance).
	ItemReady() bool
}

// Set is an immutable version of a group of labelled items: the items in
// stable slots, the label index over their labels, the ready subset, and id
// order for answers. An edit copies only what it changes.
type Set[T Item] struct {
	slots slotArray[T] // by slot; the zero T marks a free slot
	free  []uint32     // free slots, reused before growing
	byID  []uint32     // occupied slots sorted by item id, but for late
	// byIDFill is how far byID's array has been written, shared by the
	// versions that share the array: a version whose byID ends there may
	// append in place (older versions never read past their own length).
	byIDFill *int
	// late are the slots of ids added since byID was last merged whose ids
	// sort among byID's, sorted by id: a commit adding such an id copies
	// late, not byID (a new id in the middle of a service of n was an
	// n-slot copy per commit). Merged into byID once past lateLimit.
	late  []uint32
	all   *bitset.BitSet // occupied slots
	ready *bitset.BitSet // slots whose item is ready

	// The label index is a base plus a delta. base indexes the items of
	// baseSlots (the slots as they were when base was built); dirty holds
	// the slots whose labels changed since. A query matches base, drops
	// dirty slots and checks those few one by one; when dirty grows past a
	// bound, base is moved forward with a copy-on-write edit, beside the
	// writer for a large set (fold.go). So a commit costs O(changed)
	// instead of a copy of every bitmap it touches.
	base      *label.Postings
	baseSlots slotArray[T]
	dirty     *bitset.BitSet

	// fold is the compaction running off the writer's path, shared by the
	// versions edited while it runs (nil: none); since holds the slots
	// those edits changed, which stay dirty when its base is adopted.
	fold  *fold[T]
	since *bitset.BitSet
}

func emptySet[T Item]() Set[T] {
	return Set[T]{base: label.NewPostings(0), dirty: bitset.New(0), all: bitset.New(0), ready: bitset.New(0)}
}

// buildSet builds a set in one pass: slot i is the i-th item by id, and the
// label index is built in bulk. items is sorted in place.
func buildSet[T Item](items []T) Set[T] {
	slices.SortFunc(items, func(a, b T) int { return cmp.Compare(a.ItemID(), b.ItemID()) })
	n := uint(len(items))
	slots := slotsOf(items)
	s := Set[T]{slots: slots, byID: make([]uint32, n),
		all: bitset.New(n), ready: bitset.New(n), dirty: bitset.New(n), baseSlots: slots}
	b := label.NewPostingsBuilder(uint32(n))
	handles := map[string]int{}
	for i, it := range items {
		s.byID[i] = uint32(i)
		s.all.Set(uint(i))
		if it.ItemReady() {
			s.ready.Set(uint(i))
		}
		for key, v := range it.ItemLabels().All() {
			h, ok := handles[key]
			if !ok {
				h = b.Key(key)
				handles[key] = h
			}
			b.AppendSlot(h, v, uint32(i))
		}
	}
	s.base = b.Build()
	return s
}

// Len is the number of items.
func (s *Set[T]) Len() int { return len(s.byID) + len(s.late) }

// ReadyLen is the number of ready items.
func (s *Set[T]) ReadyLen() int { return int(s.ready.Count()) }

// Items returns the items sorted by id.
func (s *Set[T]) Items() []T {
	out := make([]T, 0, s.Len())
	s.merged(s.byID, s.late, func(run []uint32) {
		for _, slot := range run {
			out = append(out, s.slots.at(slot))
		}
	})
	return out
}

// Get returns the item with id.
func (s *Set[T]) Get(id string) (T, bool) {
	slot, ok := s.find(id)
	if !ok {
		var zero T
		return zero, false
	}
	return s.slots.at(slot), true
}

// find returns the slot of id, by binary search over byID, then late.
func (s *Set[T]) find(id string) (uint32, bool) {
	byItemID := func(slot uint32, id string) int { return cmp.Compare(s.slots.at(slot).ItemID(), id) }
	if i, ok := slices.BinarySearchFunc(s.byID, id, byItemID); ok {
		return s.byID[i], true
	}
	if i, ok := slices.BinarySearchFunc(s.late, id, byItemID); ok {
		return s.late[i], true
	}
	return 0, false
}

// Select returns the items matching sel (nil: all), only ready ones if
// readyOnly, sorted by id.
func (s *Set[T]) Select(sel label.Selector, readyOnly bool) []T {
	universe := s.all
	if readyOnly {
		universe = s.ready
	}
	if len(sel) == 0 {
		if !readyOnly {
			return s.Items()
		}
		return s.inIDOrder(universe)
	}
	return s.inIDOrder(s.Match(sel, readyOnly))
}

// Match returns the slots of the items matching sel (only ready ones if
// readyOnly), for callers that combine sets before listing; At maps a slot
// back to its item. The bitset is the caller's.
func (s *Set[T]) Match(sel label.Selector, readyOnly bool) *bitset.BitSet {
	universe := s.all
	if readyOnly {
		universe = s.ready
	}
	m := s.base.Match(sel, universe)
	if !s.dirty.Any() {
		return m
	}
	m.InPlaceDifference(s.dirty)
	for slot, ok := s.dirty.NextSet(0); ok; slot, ok = s.dirty.NextSet(slot + 1) {
		if universe.Test(slot) && sel.Matches(s.slots.at(uint32(slot)).ItemLabels()) {
			m.Set(slot)
		}
	}
	return m
}

// At returns the item in slot, or the zero T for a free slot.
func (s *Set[T]) At(slot uint32) T { return s.slots.at(slot) }

// inIDOrder lists the items of set sorted by id: sorting the few when the
// set is small, filtering id order when it is large.
func (s *Set[T]) inIDOrder(set *bitset.BitSet) []T {
	n := int(set.Count())
	out := make([]T, 0, n)
	if n == 0 {
		return out
	}
	if n*8 < s.Len() {
		for slot, ok := set.NextSet(0); ok; slot, ok = set.NextSet(slot + 1) {
			out = append(out, s.slots.at(uint32(slot)))
		}
		slices.SortFunc(out, func(a, b T) int { return cmp.Compare(a.ItemID(), b.ItemID()) })
		return out
	}
	s.merged(s.byID, s.late, func(run []uint32) {
		for _, slot := range run {
			if set.Test(uint(slot)) {
				out = append(out, s.slots.at(slot))
			}
		}
	})
	return out
}

// setEdit is the writer's working copy of a set during one commit. Slots
// freed during the edit are not reused until it finishes, so that a
// non-free slot of the original id order still holds the same id.
type setEdit[T Item] struct {
	orig    *Set[T]
	s       Set[T]
	added   []uint32          // slots given to new ids in this edit, in order
	newIDs  map[string]uint32 // the ids of added[:indexed], built when looked up
	indexed int
	freed   []uint32
	gone    bool   // some original slot was freed
	gen     uint64 // owns the slot chunks it copied
}

// generations tags edits, so that an edit writes in place only the slot
// chunks it copied itself.
var generations atomic.Uint64

func (s *Set[T]) edit() *setEdit[T] {
	n := Set[T]{
		slots:     s.slots.clone(),
		free:      slices.Clone(s.free),
		byID:      s.byID, // rebuilt in finish if ids come or go
		byIDFill:  s.byIDFill,
		late:      s.late,
		all:       label.CloneBits(s.all),
		ready:     label.CloneBits(s.ready),
		base:      s.base,
		baseSlots: s.baseSlots,
		dirty:     label.CloneBits(s.dirty),
		fold:      s.fold,
	}
	if s.since != nil {
		n.since = label.CloneBits(s.since)
	}
	return &setEdit[T]{orig: s, s: n, gen: generations.Add(1)}
}

// lookup finds the slot of id in the working copy.
func (e *setEdit[T]) lookup(id string) (uint32, bool) {
	var zero T
	if slot, ok := e.newID(id); ok {
		return slot, e.s.slots.at(slot) != zero
	}
	slot, ok := e.orig.find(id)
	if !ok || e.s.slots.at(slot) == zero {
		return 0, false
	}
	return slot, true
}

// newID finds id among the ids added in this edit, indexing the ones added
// since the last call: a commit that only adds never builds the map.
func (e *setEdit[T]) newID(id string) (uint32, bool) {
	if e.indexed < len(e.added) {
		if e.newIDs == nil {
			e.newIDs = make(map[string]uint32, len(e.added))
		}
		var zero T
		for _, slot := range e.added[e.indexed:] {
			if it := e.s.slots.at(slot); it != zero {
				e.newIDs[it.ItemID()] = slot
			}
		}
		e.indexed = len(e.added)
	}
	slot, ok := e.newIDs[id]
	return slot, ok
}

// get returns the current item with id, or the zero T.
func (e *setEdit[T]) get(id string) T {
	if slot, ok := e.lookup(id); ok {
		return e.s.slots.at(slot)
	}
	var zero T
	return zero
}

// upsert places it, replacing the item with the same id if any.
func (e *setEdit[T]) upsert(it T) {
	slot, exists := e.lookup(it.ItemID())
	if exists {
		old := e.s.slots.at(slot)
		e.s.ready.Clear(uint(slot))
		if !old.ItemLabels().Equal(it.ItemLabels()) {
			e.s.touch(slot)
		}
	} else {
		slot = e.newSlot(it)
	}
	e.place(slot, it)
}

// insert places it, whose id the caller knows is not in the set: upsert
// without looking for it.
func (e *setEdit[T]) insert(it T) { e.place(e.newSlot(it), it) }

// newSlot takes a free slot, or a new one, for it's id.
func (e *setEdit[T]) newSlot(it T) uint32 {
	var slot uint32
	if n := len(e.s.free); n > 0 {
		slot = e.s.free[n-1]
		e.s.free = e.s.free[:n-1]
	} else {
		var zero T
		slot = e.s.slots.push(zero, e.gen)
	}
	e.added = append(e.added, slot)
	e.s.touch(slot)
	return slot
}

func (e *setEdit[T]) place(slot uint32, it T) {
	e.s.slots.set(slot, it, e.gen)
	e.s.all.Set(uint(slot))
	if it.ItemReady() {
		e.s.ready.Set(uint(slot))
	}
}

// remove deletes id and reports whether it was there.
func (e *setEdit[T]) remove(id string) bool {
	slot, ok := e.lookup(id)
	if !ok {
		return false
	}
	var zero T
	e.s.all.Clear(uint(slot))
	e.s.ready.Clear(uint(slot))
	e.s.slots.set(slot, zero, e.gen)
	e.s.touch(slot)
	e.freed = append(e.freed, slot)
	if _, isNew := e.newID(id); !isNew {
		e.gone = true
	}
	return true
}

// maxDirty is how many changed slots a set version carries before its base
// index is moved forward (twice that while a fold runs): small enough that
// checking them one by one stays cheap for a query, large enough to spread
// the bitmap copies.
func maxDirty(n int) uint { return uint(min(max(n/8, 16), 4096)) }

// alignFrom is the set size from which compaction leaves the dirty slots of
// the last, partly filled 64-slot word for the next one: base's bitsets then
// end on whole words, so the next compaction appends words to them instead
// of copying them (label.Postings), which on a set of a million slots is
// most of what a commit of new instances costs.
const alignFrom = 64 * 64

// compact moves the base index forward over the dirty slots, on the
// writer's path: for sets too small for a fold to be worth a goroutine.
func (s *Set[T]) compact() {
	s.base, s.baseSlots, s.dirty = compacted(s.base.Edit(), s.slots, s.baseSlots, s.dirty)
}

// labelsCaches keep the memory of compactions' label.LabelsCaches: each
// grew to ~16 postings per distinct set, and a bulk load did that anew
// every 4,096 instances.
var labelsCaches = sync.Pool{New: func() any { return new(label.LabelsCache) }}

// compacted moves index ix (an edit of the base built over baseSlots)
// forward over the dirty slots to what slots holds, and returns it, the
// slots it now indexes and the slots left dirty (past the cut). Each
// bitmap it touches is copied once (label.Postings.Edit), however many
// slots changed, or shared when the slots only grow past its end. It reads
// its arguments and writes only what it returns, so it may run beside the
// writer.
func compacted[T Item](ix *label.Postings, slots, baseSlots slotArray[T], dirty *bitset.BitSet) (*label.Postings, slotArray[T], *bitset.BitSet) {
	var zero T
	n := uint(slots.len())
	cut := n
	if cut >= alignFrom {
		cut &^= 63
	}
	indexed := slots.clone()
	left := bitset.New(n)
	gen := generations.Add(1)
	sets := labelsCaches.Get().(*label.LabelsCache)
	defer func() {
		sets.Reset()
		labelsCaches.Put(sets)
	}()
	for u, ok := dirty.NextSet(0); ok; u, ok = dirty.NextSet(u + 1) {
		slot := uint32(u)
		var old T
		if int(slot) < baseSlots.len() {
			old = baseSlots.at(slot)
		}
		if u >= cut {
			// Stays dirty: the index keeps what it had for the slot.
			left.Set(u)
			indexed.set(slot, old, gen)
			continue
		}
		if old != zero {
			for k, v := range old.ItemLabels().All() {
				ix.Remove(slot, k, v)
			}
		}
		if cur := slots.at(slot); cur != zero {
			ix.AddLabelsCached(slot, cur.ItemLabels(), sets)
		}
	}
	return ix, indexed, left
}

// finish returns the new version: id order rebuilt if ids came or went
// (new ids that sort among the old ones merged into late, O(late + k log k);
// late into byID once it passes lateLimit, or when ids went) and the index
// moved forward when enough slots are dirty.
func (e *setEdit[T]) finish() Set[T] {
	s := e.s
	s.free = append(s.free, e.freed...)
	s.moveBase()
	if !e.gone && len(e.added) == 0 {
		return s
	}
	kept, late := s.byID, s.late
	if e.gone {
		kept, late = s.occupied(kept), s.occupied(late)
	}
	added := s.occupied(e.added)
	slices.SortFunc(added, func(a, b uint32) int { return cmp.Compare(s.slots.at(a).ItemID(), s.slots.at(b).ItemID()) })
	if !e.gone {
		if len(added) == 0 {
			return s // the new ids were removed again in this edit
		}
		if s.after(added[0], kept) && s.after(added[0], late) {
			s.appendIDs(added) // ids that sort after every existing one: no merge
			return s
		}
	}
	late = s.mergeIDs(late, added)
	if e.gone || len(late) > lateLimit(len(kept)+len(late)) {
		s.byID, s.byIDFill, s.late = s.mergeIDs(kept, late), nil, nil
		return s
	}
	s.late = late
	return s
}

// lateLimit is how many slots late may hold in a set of n: about sqrt(2n),
// which balances a commit's copy of late against the merges into byID.
func lateLimit(n int) int { return max(32, int(math.Sqrt(float64(2*n)))) }

// occupied returns the slots of slots that hold an item, in a new slice.
func (s *Set[T]) occupied(slots []uint32) []uint32 {
	var zero T
	out := make([]uint32, 0, len(slots))
	for _, slot := range slots {
		if s.slots.at(slot) != zero {
			out = append(out, slot)
		}
	}
	return out
}

// after reports whether slot's id sorts after every id of sorted.
func (s *Set[T]) after(slot uint32, sorted []uint32) bool {
	return len(sorted) == 0 || s.slots.at(slot).ItemID() > s.slots.at(sorted[len(sorted)-1]).ItemID()
}

// mergeIDs merges two id-sorted slot lists into a new one.
func (s *Set[T]) mergeIDs(a, b []uint32) []uint32 {
	out := make([]uint32, 0, len(a)+len(b))
	s.merged(a, b, func(run []uint32) { out = append(out, run...) })
	return out
}

// merged hands run the slots of two id-sorted lists in id order (byID and
// late make id order), as runs of a between single slots of b. Each slot of
// b finds its place in a by binary search: k log n comparisons, and runs
// taken whole, not a comparison per slot of a. (A callback, not an
// iterator: the iterator's closure was an allocation per commit.)
func (s *Set[T]) merged(a, b []uint32, run func([]uint32)) {
	i := 0
	for k, slot := range b {
		id := s.slots.at(slot).ItemID()
		j := i + sort.Search(len(a)-i, func(x int) bool { return s.slots.at(a[i+x]).ItemID() > id })
		run(a[i:j])
		run(b[k : k+1])
		i = j
	}
	run(a[i:])
}

// appendIDs appends slots to id order, in byID's array when this version
// ends where it was last written (see byIDFill), else in a new one.
func (s *Set[T]) appendIDs(slots []uint32) {
	n := len(s.byID) + len(slots)
	if s.byIDFill == nil || *s.byIDFill != len(s.byID) || cap(s.byID) < n {
		s.byID = slices.Grow(slices.Clip(s.byID), max(len(slots), len(s.byID)/4))
		s.byIDFill = new(int)
	}
	s.byID = append(s.byID, slots...)
	*s.byIDFill = n
}
