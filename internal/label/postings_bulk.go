package label

import (
	"slices"

	"github.com/bits-and-blooms/bitset"
)

// AddPosting gives value, under the key of handle k, all its slots in one
// call: the posting AppendSlot would build from them one by one (a list, or
// a bitset from the dense size on), for a caller that has already grouped
// slots by value. slots must be ascending and distinct, and value new to the
// key. A list posting keeps slots: do not modify it afterwards.
func (b *PostingsBuilder) AddPosting(k int, value string, slots []uint32) {
	if len(slots) == 0 {
		return
	}
	if last := slots[len(slots)-1]; last >= b.ix.universe {
		b.ix.universe = last + 1
	}
	p := b.newValue(&b.keys[k], value)
	p.n = uint32(len(slots))
	if len(slots) < denseAt(b.ix.universe) {
		p.list = slices.Clip(slots)
		return
	}
	p.bits = bitset.New(uint(b.ix.universe))
	w := p.bits.Words()
	for _, s := range slots {
		w[s>>6] |= 1 << (s & 63)
	}
}

// AddBits is AddPosting for slots already in a bitset of at least universe
// bits, which the index adopts: do not modify it afterwards. A value with
// fewer slots than DenseLen is stored as a list, as AppendSlot would.
func (b *PostingsBuilder) AddBits(k int, value string, bits *bitset.BitSet) {
	n := int(bits.Count())
	if n == 0 {
		return
	}
	if n < denseAt(b.ix.universe) {
		slots := make([]uint32, 0, n)
		for i, ok := bits.NextSet(0); ok; i, ok = bits.NextSet(i + 1) {
			slots = append(slots, uint32(i))
		}
		b.AddPosting(k, value, slots)
		return
	}
	if bits.Len() < uint(b.ix.universe) {
		bits = bits.Union(bitset.New(uint(b.ix.universe))) // a copy of the right size
	}
	p := b.newValue(&b.keys[k], value)
	p.n, p.bits = uint32(n), bits
}
