package calllog

import (
	"math"
	"os"
	"slices"
)

// A write that fails (a full disk: the callstore takes no more writes after
// an I/O error, the dictionary's append fails) must neither stop the
// gateway nor hold its calls in memory until the disk has room: the calls
// of the failed flush are dropped and counted (Counts), and the segment
// being written is retired, so that the next flush starts a new one, which
// writes again once there is room.

// failed drops p's pending calls, counted, and retires its active segment
// after a failed flush. Writer goroutine.
func (l *Log) failed(p *partition) {
	l.dropped.Add(uint64(len(p.pending)))
	p.pending = p.pending[:0]
	l.retire(p)
}

// retire ends p's active segment after a failed write: sealed with what
// reached it, or removed if nothing did (a new segment is tried at each
// flush while the disk is full; empty ones must not pile up).
func (l *Log) retire(p *partition) {
	sg := p.active
	if sg == nil {
		return
	}
	p.active, p.unsynced = nil, false
	if p.w != nil {
		p.w.Close() // its error is the failure being handled
		p.w = nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if sg.minT == math.MaxInt64 && sg.refs == 0 {
		p.segs = slices.DeleteFunc(p.segs, func(s *segment) bool { return s == sg })
		sg.store.Close()
		os.RemoveAll(sg.dir)
		return
	}
	if sg.minT == math.MaxInt64 {
		sg.minT, sg.maxT = sg.start, sg.start
	} else {
		sg.maxT = p.lastT
	}
	sg.sealed = true
	sg.lastUse = l.opts.Now()
	l.evictLocked()
}
