package catalog

import (
	"cmp"
	"slices"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/sextant-mesh/sextant/internal/label"
)

// Service is an immutable version of one service: its instances in stable
// slots, the label index over their metadata, and id order for answers.
type Service struct {
	Key      ServiceKey
	Revision int64 // the last revision that changed any of its instances

	slots   []*Instance     // by slot; nil marks a free slot
	free    []uint32        // free slots, reused before growing
	byID    []uint32        // occupied slots sorted by instance id
	all     *roaring.Bitmap // occupied slots
	healthy *roaring.Bitmap // healthy and not isolated

	// The label index is a base plus a delta. base indexes the instances
	// of baseSlots (the slots as they were when base was built); dirty holds
	// the slots whose metadata changed since. A query matches base, drops
	// dirty slots and checks those few one by one; when dirty grows past a
	// bound, base is moved forward with a copy-on-write edit. So a commit
	// costs O(changed) instead of a copy of every bitmap it touches.
	base      *label.Index
	baseSlots []*Instance
	dirty     *roaring.Bitmap

	memo memo // answers derived from this version, shared by its readers
}

func newService(key ServiceKey) *Service {
	return &Service{Key: key, base: label.NewIndex(), dirty: roaring.New(), all: roaring.New(), healthy: roaring.New()}
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
func (s *Service) HealthyLen() int { return int(s.healthy.GetCardinality()) }

// Instances returns the instances sorted by id.
func (s *Service) Instances() []*Instance {
	out := make([]*Instance, len(s.byID))
	for i, slot := range s.byID {
		out[i] = s.slots[slot]
	}
	return out
}

// find returns the slot of id, by binary search over id order.
func (s *Service) find(id string) (uint32, bool) {
	i, ok := slices.BinarySearchFunc(s.byID, id, func(slot uint32, id string) int {
		return cmp.Compare(s.slots[slot].ID, id)
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
func (s *Service) match(sel label.Selector, universe *roaring.Bitmap) *roaring.Bitmap {
	m := s.base.Match(sel, universe)
	if s.dirty.IsEmpty() {
		return m
	}
	m.AndNot(s.dirty)
	it := s.dirty.Iterator()
	for it.HasNext() {
		slot := it.Next()
		if universe.Contains(slot) && sel.Matches(s.slots[slot].Metadata) {
			m.Add(slot)
		}
	}
	return m
}

// inIDOrder lists the instances of set sorted by id: sorting the few when the
// set is small, filtering id order when it is large.
func (s *Service) inIDOrder(set *roaring.Bitmap) []*Instance {
	n := int(set.GetCardinality())
	out := make([]*Instance, 0, n)
	if n == 0 {
		return out
	}
	if n*8 < len(s.byID) {
		it := set.Iterator()
		for it.HasNext() {
			out = append(out, s.slots[it.Next()])
		}
		slices.SortFunc(out, func(a, b *Instance) int { return cmp.Compare(a.ID, b.ID) })
		return out
	}
	for _, slot := range s.byID {
		if set.Contains(slot) {
			out = append(out, s.slots[slot])
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
	gone   bool // some original slot was freed
}

func (s *Service) edit(rev int64) *edit {
	n := &Service{
		Key:       s.Key,
		Revision:  rev,
		slots:     slices.Clone(s.slots),
		free:      slices.Clone(s.free),
		byID:      s.byID, // rebuilt in finish if ids come or go
		all:       s.all.Clone(),
		healthy:   s.healthy.Clone(),
		base:      s.base,
		baseSlots: s.baseSlots,
		dirty:     s.dirty.Clone(),
	}
	return &edit{orig: s, s: n}
}

func (e *edit) indexAdd(slot uint32, in *Instance) {
	e.s.all.Add(slot)
	if in.Healthy && !in.Isolated {
		e.s.healthy.Add(slot)
	}
}

func (e *edit) indexRemove(slot uint32, in *Instance) {
	e.s.all.Remove(slot)
	e.s.healthy.Remove(slot)
}

func sameMetadata(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// lookup finds the slot of id in the working copy.
func (e *edit) lookup(id string) (uint32, bool) {
	if slot, ok := e.newIDs[id]; ok {
		return slot, e.s.slots[slot] != nil
	}
	slot, ok := e.orig.find(id)
	if !ok || e.s.slots[slot] == nil {
		return 0, false
	}
	return slot, true
}

// get returns the current instance with id, or nil.
func (e *edit) get(id string) *Instance {
	if slot, ok := e.lookup(id); ok {
		return e.s.slots[slot]
	}
	return nil
}

// upsert places in, replacing the instance with the same id if any.
func (e *edit) upsert(in *Instance) {
	slot, exists := e.lookup(in.ID)
	if exists {
		old := e.s.slots[slot]
		e.indexRemove(slot, old)
		if !sameMetadata(old.Metadata, in.Metadata) {
			e.s.dirty.Add(slot)
		}
	} else {
		if n := len(e.s.free); n > 0 {
			slot = e.s.free[n-1]
			e.s.free = e.s.free[:n-1]
		} else {
			slot = uint32(len(e.s.slots))
			e.s.slots = append(e.s.slots, nil)
		}
		if e.newIDs == nil {
			e.newIDs = make(map[string]uint32)
		}
		e.newIDs[in.ID] = slot
		e.s.dirty.Add(slot)
	}
	e.s.slots[slot] = in
	e.indexAdd(slot, in)
}

// remove deletes id and reports whether it was there.
func (e *edit) remove(id string) bool {
	slot, ok := e.lookup(id)
	if !ok {
		return false
	}
	e.indexRemove(slot, e.s.slots[slot])
	e.s.slots[slot] = nil
	e.s.dirty.Add(slot)
	e.freed = append(e.freed, slot)
	if _, isNew := e.newIDs[id]; !isNew {
		e.gone = true
	}
	return true
}

// maxDirty is how many changed slots a service version carries before its
// base index is moved forward: small enough that checking them one by one
// stays cheap for a query, large enough to spread the bitmap copies.
func maxDirty(n int) uint64 { return uint64(min(max(n/8, 16), 1024)) }

// compact moves the base index forward over the dirty slots. Each bitmap it
// touches is copied once (label.Index.Edit), however many slots changed.
func (s *Service) compact() {
	ix := s.base.Edit()
	it := s.dirty.Iterator()
	for it.HasNext() {
		slot := it.Next()
		if int(slot) < len(s.baseSlots) {
			if old := s.baseSlots[slot]; old != nil {
				for k, v := range old.Metadata {
					ix.Remove(slot, k, v)
				}
			}
		}
		if cur := s.slots[slot]; cur != nil {
			for k, v := range cur.Metadata {
				ix.Add(slot, k, v)
			}
		}
	}
	s.base, s.baseSlots, s.dirty = ix, s.slots, roaring.New()
}

// finish rebuilds id order if ids came or went (one merge, O(n + k log k))
// and compacts the index when enough slots are dirty.
func (e *edit) finish() *Service {
	s := e.s
	s.free = append(s.free, e.freed...)
	if s.dirty.GetCardinality() > maxDirty(len(s.slots)) {
		s.compact()
	}
	if !e.gone && len(e.newIDs) == 0 {
		return s
	}
	kept := s.byID
	if e.gone {
		kept = make([]uint32, 0, len(s.byID))
		for _, slot := range s.byID {
			if s.slots[slot] != nil {
				kept = append(kept, slot)
			}
		}
	}
	added := make([]uint32, 0, len(e.newIDs))
	for _, slot := range e.newIDs {
		if s.slots[slot] != nil {
			added = append(added, slot)
		}
	}
	slices.SortFunc(added, func(a, b uint32) int { return cmp.Compare(s.slots[a].ID, s.slots[b].ID) })
	merged := make([]uint32, 0, len(kept)+len(added))
	i, j := 0, 0
	for i < len(kept) && j < len(added) {
		if s.slots[kept[i]].ID < s.slots[added[j]].ID {
			merged = append(merged, kept[i])
			i++
		} else {
			merged = append(merged, added[j])
			j++
		}
	}
	merged = append(merged, kept[i:]...)
	s.byID = append(merged, added[j:]...)
	return s
}
