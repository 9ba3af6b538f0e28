package commit

import "github.com/sextant-mesh/sextant/internal/store"

// spares is memory of batches the catalog now holds, kept for the next
// batches: a bulk load otherwise allocated it afresh per batch, a third of
// the bytes it allocated, and that set the GC's pace. A pipelined batch's
// encoding chunks (Tx.Encode), op arrays and view of its writes are read by
// no one once the catalog holds it: the store copied the values into its own
// batch, the follower adopted the ops' Objects (store.Op), and the overlay
// is dropped. Committer goroutine only.
type spares struct {
	chunks [][]byte
	ops    [][]store.Op
	over   map[recKey]pending
	undo   []undoEntry
}

// Bounds on what is kept: about one large batch's worth.
const (
	maxSpareChunks = 16      // of up to maxEncodeChunk bytes: 4 MiB
	maxSpareOps    = 64      // op arrays
	maxSpareOver   = 1 << 15 // entries of a view worth clearing and keeping
)

// keep takes the memory of f, which the catalog holds.
func (s *spares) keep(f *inflight) {
	for _, b := range f.chunks {
		if len(s.chunks) < maxSpareChunks {
			s.chunks = append(s.chunks, b[:0])
		}
	}
	for _, ops := range f.ops {
		if len(s.ops) < maxSpareOps && cap(ops) >= 16 {
			ops = ops[:cap(ops)]
			clear(ops) // Objects and keys of instances that may be gone
			s.ops = append(s.ops, ops[:0])
		}
	}
	// Only a big batch's view: clearing a map costs its capacity, which a
	// batch of a few records would pay for nothing.
	if s.over == nil && len(f.recs) > bigBatch && len(f.recs) <= maxSpareOver {
		clear(f.recs)
		s.over = f.recs
	}
}

// chunk returns a spare encoding chunk, or nil.
func (s *spares) chunk() []byte {
	n := len(s.chunks)
	if n == 0 {
		return nil
	}
	b := s.chunks[n-1]
	s.chunks = s.chunks[:n-1]
	return b
}

// opsFor returns a spare op array with room for n ops, or nil.
func (s *spares) opsFor(n int) []store.Op {
	for i := len(s.ops) - 1; i >= 0; i-- {
		if ops := s.ops[i]; cap(ops) >= n {
			s.ops[i] = s.ops[len(s.ops)-1]
			s.ops = s.ops[:len(s.ops)-1]
			return ops
		}
	}
	return nil
}

// view returns a spare map for a batch's view of its writes, or nil.
func (s *spares) view() map[recKey]pending {
	m := s.over
	s.over = nil
	return m
}

// undoFor returns the spare undo log with room for n entries, or nil.
func (s *spares) undoFor(n int) []undoEntry {
	if cap(s.undo) < n {
		return nil
	}
	u := s.undo
	s.undo = nil
	return u
}

// keepUndo takes back a batch's undo log once it is planned.
func (s *spares) keepUndo(u []undoEntry) {
	if cap(u) > cap(s.undo) && cap(u) <= maxSpareOver {
		clear(u[:cap(u)])
		s.undo = u[:0]
	}
}
