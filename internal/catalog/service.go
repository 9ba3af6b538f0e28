package catalog

import (
	"cmp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/bits-and-blooms/bitset"

	"github.com/sextant-mesh/sextant/internal/label"
)

// Service is an immutable version of one service: its instances in stable
// slots, the label index over their metadata, and id order for answers.
type Service struct {
	Key      ServiceKey
	Revision int64 // the last revision that changed any of its instances

	slots   slotArray      // by slot; nil marks a free slot
	free    []uint32       // free slots, reused before growing
	byID    []uint32       // occupied slots sorted by instance id
	all     *bitset.BitSet // occupied slots
	healthy *bitset.BitSet // healthy and not isolated

	// The label index is a base plus a delta. base indexes the instances
	// of baseSlots (the slots as they were when base was built); dirty holds
	// the slots whose metadata changed since. A query matches base, drops
	// dirty slots and checks those few one by one; when dirty grows past a
	// bound, base is moved forward with a copy-on-write edit. So a commit
	// costs O(changed) instead of a copy of every bitmap it touches.
	base      *label.Postings
	baseSlots slotArray
	dirty     *bitset.BitSet

	memo memo // answers derived from this version, shared by its readers
}

func newService(key ServiceKey) *Service {
	return &Service{Key: key, base: label.NewPostings(0), dirty: bitset.New(0), all: bitset.New(0), healthy: bitset.New(0)}
}

// maxMemo bounds the answers kept per service version.
const maxMemo = 32

// memo keeps encoded answers of one immutable service version, so that the
// many readers woken by one change (or polling the same query) encode it
// once and share the bytes.
type memo struct {
	mu sync.Mutex
	m  map[string]*memoEntry
}

type memoEntry struct {
	once sync.Once
	b    []byte
}

// Memo returns the answer stored under key for this version, building it
// once with build; concurrent callers wait for the one build. Keys beyond
// the bound are built without being kept. The bytes must not be modified.
func (s *Service) Memo(key string, build func() []byte) []byte {
	s.memo.mu.Lock()
	e := s.memo.m[key]
	if e == nil {
		if len(s.memo.m) >= maxMemo {
			s.memo.mu.Unlock()
			return build()
		}
		if s.memo.m == nil {
			s.memo.m = make(map[string]*memoEntry)
		}
		e = &memoEntry{}
		s.memo.m[key] = e
	}
	s.memo.mu.Unlock()
	e.once.Do(func() { e.b = build() })
	return e.b
}

// Len is the number of instances.
func (s *Service) Len() int { return len(s.byID) }

// HealthyLen is the number of healthy, non-isolated instances.
func (s *Service) HealthyLen() int { return int(s.healthy.Count()) }

// Instances returns the instances sorted by id.
func (s *Service) Instances() []*Instance {
	out := make([]*Instance, len(s.byID))
	for i, slot := range s.byID {
		out[i] = s.slots.at(slot)
	}
	return out
}

// find returns the slot of id, by binary search over id order.
func (s *Service) find(id string) (uint32, bool) {
	i, ok := slices.BinarySearchFunc(s.byID, id, func(slot uint32, id string) int {
		return cmp.Compare(s.slots.at(slot).ID, id)
	})
	if !ok {
		return 0, false
	}
	return s.byID[i], true
}

// Select returns the instances matching sel (nil: all), only healthy
// non-isolated ones if healthyOnly, sorted by id.
func (s *Service) Select(sel label.Selector, healthyOnly bool) []*Instance {
	universe := s.all
	if healthyOnly {
		universe = s.healthy
	}
	if len(sel) == 0 {
		if !healthyOnly {
			return s.Instances()
		}
		return s.inIDOrder(universe)
	}
	return s.inIDOrder(s.match(sel, universe))
}

// match evaluates sel over universe: the base index for the clean slots,
// the selector itself for the dirty ones.
func (s *Service) match(sel label.Selector, universe *bitset.BitSet) *bitset.BitSet {
	m := s.base.Match(sel, universe)
	if !s.dirty.Any() {
		return m
	}
	m.InPlaceDifference(s.dirty)
	for slot, ok := s.dirty.NextSet(0); ok; slot, ok = s.dirty.NextSet(slot + 1) {
		if universe.Test(slot) && sel.Matches(s.slots.at(uint32(slot)).Metadata) {
			m.Set(slot)
		}
	}
	return m
}

// inIDOrder lists the instances of set sorted by id: sorting the few when the
// set is small, filtering id order when it is large.
func (s *Service) inIDOrder(set *bitset.BitSet) []*Instance {
	n := int(set.Count())
	out := make([]*Instance, 0, n)
	if n == 0 {
		return out
	}
	if n*8 < len(s.byID) {
		for slot, ok := set.NextSet(0); ok; slot, ok = set.NextSet(slot + 1) {
			out = append(out, s.slots.at(uint32(slot)))
		}
		slices.SortFunc(out, func(a, b *Instance) int { return cmp.Compare(a.ID, b.ID) })
		return out
	}
	for _, slot := range s.byID {
		if set.Test(uint(slot)) {
			out = append(out, s.slots.at(slot))
		}
	}
	return out
}

// edit is the writer's working copy of a service during one Apply.
// Slots freed during the edit are not reused until it finishes, so that a
// non-nil slot of the original id order still holds the same id.
type edit struct {
	orig   *Service
	s      *Service
	newIDs map[string]uint32 // ids that got a new slot in this edit
	freed  []uint32
	gone   bool   // some original slot was freed
	gen    uint64 // owns the slot chunks it copied
}

// generations tags edits, so that an edit writes in place only the slot
// chunks it copied itself.
var generations atomic.Uint64

func (s *Service) edit(rev int64) *edit {
	n := &Service{
		Key:       s.Key,
		Revision:  rev,
		slots:     s.slots.clone(),
		free:      slices.Clone(s.free),
		byID:      s.byID, // rebuilt in finish if ids come or go
		all:       s.all.Clone(),
		healthy:   s.healthy.Clone(),
		base:      s.base,
		baseSlots: s.baseSlots,
		dirty:     s.dirty.Clone(),
	}
	return &edit{orig: s, s: n, gen: generations.Add(1)}
}

func (e *edit) indexAdd(slot uint32, in *Instance) {
	e.s.all.Set(uint(slot))
	if in.Healthy && !in.Isolated {
		e.s.healthy.Set(uint(slot))
	}
}

func (e *edit) indexRemove(slot uint32) {
	e.s.all.Clear(uint(slot))
	e.s.healthy.Clear(uint(slot))
}

// lookup finds the slot of id in the working copy.
func (e *edit) lookup(id string) (uint32, bool) {
	if slot, ok := e.newIDs[id]; ok {
		return slot, e.s.slots.at(slot) != nil
	}
	slot, ok := e.orig.find(id)
	if !ok || e.s.slots.at(slot) == nil {
		return 0, false
	}
	return slot, true
}

// get returns the current instance with id, or nil.
func (e *edit) get(id string) *Instance {
	if slot, ok := e.lookup(id); ok {
		return e.s.slots.at(slot)
	}
	return nil
}

// upsert places in, replacing the instance with the same id if any.
func (e *edit) upsert(in *Instance) {
	slot, exists := e.lookup(in.ID)
	if exists {
		old := e.s.slots.at(slot)
		e.indexRemove(slot)
		if !old.Metadata.Equal(in.Metadata) {
			e.s.dirty.Set(uint(slot))
		}
	} else {
		if n := len(e.s.free); n > 0 {
			slot = e.s.free[n-1]
			e.s.free = e.s.free[:n-1]
		} else {
			slot = e.s.slots.push(nil, e.gen)
		}
		if e.newIDs == nil {
			e.newIDs = make(map[string]uint32)
		}
		e.newIDs[in.ID] = slot
		e.s.dirty.Set(uint(slot))
	}
	e.s.slots.set(slot, in, e.gen)
	e.indexAdd(slot, in)
}

// remove deletes id and reports whether it was there.
func (e *edit) remove(id string) bool {
	slot, ok := e.lookup(id)
	if !ok {
		return false
	}
	e.indexRemove(slot)
	e.s.slots.set(slot, nil, e.gen)
	e.s.dirty.Set(uint(slot))
	e.freed = append(e.freed, slot)
	if _, isNew := e.newIDs[id]; !isNew {
		e.gone = true
	}
	return true
}

// maxDirty is how many changed slots a service version carries before its
// base index is moved forward: small enough that checking them one by one
// stays cheap for a query, large enough to spread the bitmap copies.
func maxDirty(n int) uint { return uint(min(max(n/8, 16), 4096)) }

// compact moves the base index forward over the dirty slots. Each bitmap it
// touches is copied once (label.Postings.Edit), however many slots changed.
func (s *Service) compact() {
	ix := s.base.Edit()
	for u, ok := s.dirty.NextSet(0); ok; u, ok = s.dirty.NextSet(u + 1) {
		slot := uint32(u)
		if int(slot) < s.baseSlots.len() {
			if old := s.baseSlots.at(slot); old != nil {
				for k, v := range old.Metadata.All() {
					ix.Remove(slot, k, v)
				}
			}
		}
		if cur := s.slots.at(slot); cur != nil {
			for k, v := range cur.Metadata.All() {
				ix.Add(slot, k, v)
			}
		}
	}
	s.base, s.baseSlots, s.dirty = ix, s.slots.clone(), bitset.New(uint(s.slots.len()))
}

// finish rebuilds id order if ids came or went (one merge, O(n + k log k))
// and compacts the index when enough slots are dirty.
func (e *edit) finish() *Service {
	s := e.s
	s.free = append(s.free, e.freed...)
	if s.dirty.Count() > maxDirty(s.slots.len()) {
		s.compact()
	}
	if !e.gone && len(e.newIDs) == 0 {
		return s
	}
	kept := s.byID
	if e.gone {
		kept = make([]uint32, 0, len(s.byID))
		for _, slot := range s.byID {
			if s.slots.at(slot) != nil {
				kept = append(kept, slot)
			}
		}
	}
	added := make([]uint32, 0, len(e.newIDs))
	for _, slot := range e.newIDs {
		if s.slots.at(slot) != nil {
			added = append(added, slot)
		}
	}
	slices.SortFunc(added, func(a, b uint32) int { return cmp.Compare(s.slots.at(a).ID, s.slots.at(b).ID) })
	// Binary-search each new id's place and copy the runs between: k log n
	// comparisons and memory moves, not a comparison per existing id.
	merged := make([]uint32, 0, len(kept)+len(added))
	i := 0
	for _, a := range added {
		id := s.slots.at(a).ID
		j := i + sort.Search(len(kept)-i, func(x int) bool { return s.slots.at(kept[i+x]).ID > id })
		merged = append(merged, kept[i:j]...)
		merged = append(merged, a)
		i = j
	}
	s.byID = append(merged, kept[i:]...)
	return s
}
