package catalog

// chunkShift sets the slot chunk size (256): a commit copies the chunk
// directory and only the chunks it writes, not every slot of the service.
const (
	chunkShift = 8
	chunkLen   = 1 << chunkShift
)

type slotChunk struct {
	gen   uint64 // the edit that may write this chunk in place
	slots [chunkLen]*Instance
}

// slotArray maps slots to instances with copy-on-write chunks. A published
// array never changes; an edit works on a clone.
type slotArray struct {
	chunks []*slotChunk
	n      int
}

func slotsOf(ins []*Instance) slotArray {
	var a slotArray
	for _, in := range ins {
		a.push(in, 0)
	}
	return a
}

func (a *slotArray) len() int { return a.n }

func (a *slotArray) at(i uint32) *Instance { return a.chunks[i>>chunkShift].slots[i&(chunkLen-1)] }

// clone returns an array sharing every chunk with a.
func (a *slotArray) clone() slotArray {
	return slotArray{chunks: append([]*slotChunk(nil), a.chunks...), n: a.n}
}

// set writes slot i, first copying its chunk unless edit gen owns it.
func (a *slotArray) set(i uint32, in *Instance, gen uint64) {
	c := a.chunks[i>>chunkShift]
	if c.gen != gen {
		cp := *c
		cp.gen = gen
		c = &cp
		a.chunks[i>>chunkShift] = c
	}
	c.slots[i&(chunkLen-1)] = in
}

// push appends a slot holding in and returns it.
func (a *slotArray) push(in *Instance, gen uint64) uint32 {
	i := uint32(a.n)
	if a.n>>chunkShift == len(a.chunks) {
		a.chunks = append(a.chunks, &slotChunk{gen: gen})
	}
	a.n++
	a.set(i, in, gen)
	return i
}
