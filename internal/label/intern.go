package label

import (
	"hash/maphash"
	"sync/atomic"
)

// internSlots bounds an Interner: 64 KiB of pointers, and the sets they
// hold (~450 B each for 16 short pairs).
const internSlots = 8192

// Interner hands out one shared copy of each label set it has seen
// recently. Replicas of one deployment mostly carry equal metadata; held
// once, such a set costs one string instead of one per instance, is built
// once instead of per request, and an index adding it again recognises it
// by its storage (LabelsCache). It is a direct-mapped table keyed by the
// bytes the set was read from: bounded memory, one hash and one comparison
// per call. A set is held from its second sighting in a row in its slot, so
// that sets that never recur (metadata unique to each instance) cost a hash
// and no allocation. Safe for concurrent use.
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
	if !ok || len(pairs) == 0 {
		return l, ok
	}
	if slot.seen.Swap(h) == h {
		slot.held.Store(&heldLabels{raw: string(raw), l: l})
	}
	return l, true
}
