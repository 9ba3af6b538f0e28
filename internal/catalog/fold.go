package catalog

import (
	"sync"
	"sync/atomic"

	"github.com/bits-and-blooms/bitset"

	"github.com/sextant-mesh/sextant/internal/label"
)

// A fold is a compaction of a large set's label index run beside the
// writer. Folding a few thousand dirty slots into the base costs the writer
// milliseconds (16 labels each on the batch bench), and every write waiting
// behind it waited that long. Instead the version that passes maxDirty
// starts a fold of its own dirty slots; the versions after it keep their
// delta as before (what they change is also noted in since) and the first
// edit to finish after the fold did adopts its base. Only when the delta
// reaches twice the bound while the fold runs does an edit wait for it (or
// run it, if it has not started), so that queries never check more than
// that one by one.
type fold[T Item] struct {
	once sync.Once
	done atomic.Bool

	// what it starts from: a version's slots and delta, and an edit of
	// that version's base made on the writer's goroutine.
	ix               *label.Postings
	slots, baseSlots slotArray[T]
	dirty            *bitset.BitSet

	// what it made: the index, the slots it indexes, the ones it folded.
	base    *label.Postings
	indexed slotArray[T]
	folded  *bitset.BitSet
}

// foldFrom is the set size from which compaction runs as a fold: below, a
// compaction folds at most 512 slots (maxDirty), about a millisecond, and
// stays on the writer's path.
const foldFrom = alignFrom

// goFold starts a fold's work; tests replace it to choose when folds run.
var goFold = func(f folder) { go f.run() }

// folder is a fold, whatever it indexes.
type folder interface {
	run()
	finished() bool
}

func (f *fold[T]) finished() bool { return f.done.Load() }

// run does the fold once, on whichever goroutine calls it first; a second
// caller waits for it. It ends on its own: nothing of the writer's needs
// stopping.
func (f *fold[T]) run() {
	f.once.Do(func() {
		// What it folded in is the delta less what it left; the version
		// that adopts it keeps the rest of its own delta dirty.
		var left *bitset.BitSet
		f.base, f.indexed, left = compacted(f.ix, f.slots, f.baseSlots, f.dirty)
		f.folded = f.dirty.Difference(left)
		f.ix, f.slots, f.baseSlots, f.dirty = nil, slotArray[T]{}, slotArray[T]{}, nil
		f.done.Store(true)
	})
}

// touch marks slot changed: dirty for queries, and changed since the
// running fold started, if any.
func (s *Set[T]) touch(slot uint32) {
	s.dirty.Set(uint(slot))
	if s.since != nil {
		s.since.Set(uint(slot))
	}
}

// moveBase adopts a finished fold, and compacts when the delta has passed
// maxDirty: in place for a small set, else by starting a fold.
func (s *Set[T]) moveBase() {
	limit := maxDirty(s.slots.len())
	if f := s.fold; f != nil {
		if !f.finished() {
			if s.dirty.Count() <= 2*limit {
				return
			}
			f.run() // waits if the fold is running
		}
		s.adopt(f)
	}
	if s.dirty.Count() <= limit {
		return
	}
	if s.slots.len() < foldFrom {
		s.compact()
		return
	}
	f := &fold[T]{ix: s.base.Edit(), slots: s.slots, baseSlots: s.baseSlots, dirty: s.dirty}
	s.fold, s.since = f, bitset.New(uint(s.slots.len()))
	goFold(f)
}

// adopt takes a finished fold's base. The slots it folded are clean unless
// changed since it started; every other dirty slot stays dirty.
func (s *Set[T]) adopt(f *fold[T]) {
	dirty := s.dirty.Difference(f.folded)
	dirty.InPlaceUnion(s.since)
	s.base, s.baseSlots, s.dirty = f.base, f.indexed, dirty
	s.fold, s.since = nil, nil
}
