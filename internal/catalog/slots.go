package catalog

// chunkShift sets the slot chunk size (256): a commit copies the chunk
// directory and only the chunks it writes, not every slot of the set.
const (
	chunkShift = 8
	chunkLen   = 1 << chunkShift
)

type slotChunk[T comparable] struct {
	gen   uint64 // the edit that may write this chunk in place
	slots [chunkLen]T
}

// slotArray maps slots to items with copy-on-write chunks. A published
// array never changes; an edit works on a clone. The zero T marks a free
// slot.
type slotArray[T comparable] struct {
	chunks []*slotChunk[T]
	n      int
}

func slotsOf[T comparable](items []T) slotArray[T] {
	var a slotArray[T]
	for _, it := range items {
		a.push(it, 0)
	}
	return a
}

func (a *slotArray[T]) len() int { return a.n }

func (a *slotArray[T]) at(i uint32) T { return a.chunks[i>>chunkShift].slots[i&(chunkLen-1)] }

// clone returns an array sharing every chunk with a.
func (a *slotArray[T]) clone() slotArray[T] {
	return slotArray[T]{chunks: append([]*slotChunk[T](nil), a.chunks...), n: a.n}
}

// set writes slot i, first copying its chunk unless edit gen owns it.
func (a *slotArray[T]) set(i uint32, it T, gen uint64) {
	c := a.chunks[i>>chunkShift]
	if c.gen != gen {
		cp := *c
		cp.gen = gen
		c = &cp
		a.chunks[i>>chunkShift] = c
	}
	c.slots[i&(chunkLen-1)] = it
}

// push appends a slot holding it and returns it.
func (a *slotArray[T]) push(it T, gen uint64) uint32 {
	i := uint32(a.n)
	if a.n>>chunkShift == len(a.chunks) {
		a.chunks = append(a.chunks, &slotChunk[T]{gen: gen})
	}
	a.n++
	a.set(i, it, gen)
	return i
}
