package label

import (
	"hash/maphash"
	"sync/atomic"
	"unsafe"
)

// internSlots bounds an Interner: 64 KiB of pointers, and the sets they
// hold (~450 B each for 16 short pairs).
const internSlots = 8192

// maxHeldBytes is the largest set an Interner or CheckedSets holds (its
// raw bytes, or its pairs' bytes): metadata may reach 64 pairs of 4 KiB
// values, and thousands of such sets held after their instances are gone
// would be gigabytes. Replicas' metadata is typically far smaller.
const maxHeldBytes = 1 << 10

// Interner hands out one shared copy of each label set it has seen
// recently. Replicas of one deployment mostly carry equal metadata; held
// once, such a set costs one string instead of one per instance, is built
// once instead of per request, and an index adding it again recognises it
// by its storage (LabelsCache). It is a direct-mapped table keyed by the
// bytes the set was read from: bounded memory, one hash and one comparison
// per call. A set of up to maxHeldBytes is held from its second sighting in
// a row in its slot, so that sets that never recur (metadata unique to each
// instance) cost a hash and no allocation. Safe for concurrent use.
type Interner struct {
	seed  maphash.Seed
	slots [internSlots]internSlot
}

type internSlot struct {
	held atomic.Pointer[heldLabels]
	seen atomic.Uint64 // hash of the last raw that missed
}

type heldLabels struct {
	raw string
	l   Labels
}

// NewInterner returns an empty Interner.
func NewInterner() *Interner { return &Interner{seed: maphash.MakeSeed()} }

// FromBytePairs is FromBytePairs(pairs), returning the held set when raw
// equals the raw it was held for. raw is the encoding pairs were read from,
// and the caller's word that equal raws hold equal pairs (a decoder's
// input: the same bytes read the same way). Comparing it whole costs a
// tenth of comparing the pairs one by one.
func (in *Interner) FromBytePairs(raw []byte, pairs []BytePair) (Labels, bool) {
	h := maphash.Bytes(in.seed, raw)
	slot := &in.slots[h%internSlots]
	if held := slot.held.Load(); held != nil && held.raw == string(raw) {
		return held.l, true
	}
	l, ok := FromBytePairs(pairs)
	if !ok || len(pairs) == 0 || len(raw) > maxHeldBytes {
		return l, ok
	}
	if slot.seen.Swap(h) == h {
		slot.held.Store(&heldLabels{raw: string(raw), l: l})
	}
	return l, true
}

// checkedSlots bounds a CheckedSets: 64 KiB, and the sets held.
const (
	checkedBits  = 12
	checkedSlots = 1 << checkedBits
)

// CheckedSets remembers label sets that passed a caller's check, by their
// storage: sets shared through an Interner are then checked once instead
// of once per instance. An entry holds its set, so the storage it names is
// not freed and reused for other bytes while it is held. A set takes an
// empty slot at once, and a held one's from its second check in a row
// there, so that sets that never recur cost no allocation once the slots
// are taken. Safe for concurrent use.
type CheckedSets struct {
	slots [checkedSlots]struct {
		held atomic.Pointer[Labels]
		seen atomic.Uintptr
	}
}

func (c *CheckedSets) slot(l Labels) (*atomic.Pointer[Labels], *atomic.Uintptr, uintptr) {
	p := uintptr(unsafe.Pointer(unsafe.StringData(l.s)))
	// Fibonacci hashing: sets of one size class lie a fixed stride apart,
	// which a plain modulo would crowd into a few slots.
	s := &c.slots[(uint64(p)*0x9E3779B97F4A7C15)>>(64-checkedBits)]
	return &s.held, &s.seen, p
}

// Has reports whether l is a copy of a set added.
func (c *CheckedSets) Has(l Labels) bool {
	held, _, _ := c.slot(l)
	h := held.Load()
	return h != nil && h.same(l)
}

// Add records that l passed the check.
func (c *CheckedSets) Add(l Labels) {
	if len(l.s) == 0 || len(l.s) > maxHeldBytes {
		return
	}
	held, seen, p := c.slot(l)
	if seen.Swap(p) == p || held.Load() == nil {
		h := l // only this copy escapes, not every call's l
		held.Store(&h)
	}
}

// same reports whether l and o are copies of one Labels.
func (l *Labels) same(o Labels) bool {
	return unsafe.StringData(l.s) == unsafe.StringData(o.s) && len(l.s) == len(o.s) &&
		unsafe.SliceData(l.ends) == unsafe.SliceData(o.ends) && len(l.ends) == len(o.ends)
}
