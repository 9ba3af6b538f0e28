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
// by its storage (LabelsCache). It is a direct-mapped table: bounded
// memory, one hash and one comparison per call. A set is held from its
// second sighting in a row of its slot, so that sets that never recur
// (metadata unique to each instance) cost a hash and no allocation. Safe
// for concurrent use.
type Interner struct {
	seed  maphash.Seed
	slots [internSlots]internSlot
}

type internSlot struct {
	held atomic.Pointer[heldLabels]
	seen atomic.Uint64 // hash of the last set that missed
}

type heldLabels struct {
	hash uint64
	l    Labels
}

// NewInterner returns an empty Interner.
func NewInterner() *Interner { return &Interner{seed: maphash.MakeSeed()} }

// FromBytePairs is FromBytePairs(pairs), returning the held set when it
// has one equal to pairs. raw is hashed to pick the slot: pass the bytes
// the pairs were read from, so that equal sets meet (unequal raws for
// equal pairs only cost a miss). Only pairs decide equality.
func (in *Interner) FromBytePairs(raw []byte, pairs []BytePair) (Labels, bool) {
	h := maphash.Bytes(in.seed, raw)
	slot := &in.slots[h%internSlots]
	if held := slot.held.Load(); held != nil && held.hash == h && held.l.equalPairs(pairs) {
		return held.l, true
	}
	l, ok := FromBytePairs(pairs)
	if !ok || len(pairs) == 0 {
		return l, ok
	}
	if slot.seen.Swap(h) == h {
		slot.held.Store(&heldLabels{hash: h, l: l})
	}
	return l, true
}

// equalPairs reports whether l holds exactly pairs, in order.
func (l *Labels) equalPairs(pairs []BytePair) bool {
	if len(l.ends) != 2*len(pairs) {
		return false
	}
	start := uint32(0)
	for i, p := range pairs {
		k, v := l.ends[2*i], l.ends[2*i+1]
		if l.s[start:k] != string(p.Key) || l.s[k:v] != string(p.Value) {
			return false
		}
		start = v
	}
	return true
}
