package catalog

import (
	"errors"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/store"
)

// ErrCompacted is returned for a change-log read older than the history kept.
var ErrCompacted = errors.New("catalog: required revision has been compacted")

const chunkSize = 4096

type logChunk [chunkSize]Change

// changeLog is the bounded history of changes. The writer appends into
// chunks past the published end and then publishes a new view; readers only
// read below a view's end, so they never wait and never see a torn append.
type changeLog struct {
	view atomic.Pointer[logView]
	size int
}

type logView struct {
	chunks    []*logChunk
	base      int64 // absolute position of chunks[0][0]
	start     int64 // absolute position of the oldest retained change
	end       int64 // one past the newest published change
	rev       int64 // revision the log is complete up to
	compacted int64 // reads with since < compacted answer ErrCompacted
}

func (l *changeLog) init(size int) {
	l.size = size
	l.view.Store(&logView{})
}

// reset drops all history: the log starts complete from rev.
func (l *changeLog) reset(rev int64) {
	l.view.Store(&logView{rev: rev, compacted: rev})
}

func (v *logView) at(pos int64) *Change {
	off := pos - v.base
	return &v.chunks[off/chunkSize][off%chunkSize]
}

func (l *changeLog) append(rev int64, changes []Change) {
	old := l.view.Load()
	n := *old
	n.chunks = old.chunks
	for _, ch := range changes {
		off := n.end - n.base
		if int(off/chunkSize) == len(n.chunks) {
			n.chunks = append(n.chunks[:len(n.chunks):len(n.chunks)], new(logChunk))
		}
		n.chunks[off/chunkSize][off%chunkSize] = ch
		n.end++
	}
	n.rev = rev
	if over := n.end - n.start - int64(l.size); over > 0 {
		n.compacted = n.at(n.start + over - 1).Revision
		n.start += over
		if drop := (n.start - n.base) / chunkSize; drop > 0 {
			n.chunks = n.chunks[drop:]
			n.base += drop * chunkSize
		}
	}
	l.view.Store(&n)
}

// kindSet is a set of kinds; the empty set means every kind.
type kindSet struct {
	bits [4]uint64
	any  bool
}

func newKindSet(kinds []store.Kind) kindSet {
	var s kindSet
	for _, k := range kinds {
		s.bits[k>>6] |= 1 << (k & 63)
		s.any = true
	}
	return s
}

func (s kindSet) has(k store.Kind) bool { return !s.any || s.bits[k>>6]&(1<<(k&63)) != 0 }

func (l *changeLog) since(since int64, limit int, kinds kindSet) ([]Change, int64, bool, error) {
	v := l.view.Load()
	if since < v.compacted {
		return nil, 0, false, fmt.Errorf("%w: changes after revision %d are no longer kept (history starts after %d); list in full and follow from the list's revision",
			ErrCompacted, since, v.compacted)
	}
	if limit <= 0 {
		limit = 1
	}
	n := int(v.end - v.start)
	i := sort.Search(n, func(i int) bool { return v.at(v.start+int64(i)).Revision > since })
	var out []Change
	for pos := v.start + int64(i); pos < v.end; pos++ {
		ch := v.at(pos)
		if len(out) >= limit && ch.Revision != out[len(out)-1].Revision {
			return out, out[len(out)-1].Revision, true, nil
		}
		if kinds.has(ch.Kind) {
			out = append(out, *ch)
		}
	}
	return out, v.rev, false, nil
}
