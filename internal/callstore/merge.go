package callstore

import "time"

// stuckAfter is how long the writer holding the watermark must go without
// handing off, with half the memory budget waiting above it, before the
// merger stops waiting for it. Shorter stalls are scheduling noise.
const stuckAfter = time.Second

// The merger goroutine turns per-writer batches into one t-ordered stream
// and cuts it into chunks for the encoder.
//
// It may only emit a record once no writer can still put a smaller t: the
// watermark W is the minimum, over writers not closed, of the t each last
// handed off (a writer's later records are >= it). Sync, Close and memory
// pressure merge past W; a writer that later puts a smaller t then starts a
// new run (docs/callstore.md), which queries merge.

type source struct {
	batches [][]record
	pos     int // next record in batches[0]
}

func (src *source) head() int64 { return src.batches[0][src.pos].t }

type merger struct {
	s       *Store
	srcs    map[*Writer]*source
	pending int // records in srcs
	out     []record
	last    int64 // t of the last record merged
	heap    []*source
}

type chunkJob struct {
	recs []record
	req  *flushReq
}

func (s *Store) mergeLoop() {
	defer s.wg.Done()
	m := &merger{s: s, srcs: make(map[*Writer]*source), out: s.getChunk(), last: minT}
	// The tick re-checks a stuck watermark when no writer hands off (all
	// blocked on the memory bound).
	tick := time.NewTicker(stuckAfter / 2)
	defer tick.Stop()
	for {
		select {
		case <-s.wake:
			m.round(nil)
		case <-tick.C:
			m.round(nil)
		case req := <-s.flushReq:
			m.round(req)
		case <-s.done:
			return
		}
	}
}

// round takes the handed-off batches and merges what it may; with req it
// merges everything and sends the partial chunk and req to the encoder.
func (m *merger) round(req *flushReq) {
	s := m.s
	w := int64(maxT)
	var holder *Writer // the open writer w waits for
	s.mu.Lock()
	live := s.writers[:0:0]
	for _, wr := range s.writers {
		src := m.srcs[wr]
		if src == nil {
			src = &source{}
			m.srcs[wr] = src
		}
		for _, b := range wr.queue {
			src.batches = append(src.batches, b)
			m.pending += len(b)
		}
		wr.queue = nil
		if wm := max(wr.lastHanded, wr.floor); !wr.gone && wm < w {
			w, holder = wm, wr
		}
		if wr.gone && len(src.batches) == 0 {
			delete(m.srcs, wr)
			continue
		}
		live = append(live, wr)
	}
	s.writers = live
	// Idle: the writer holding the watermark has not handed off for a
	// while and is not merely blocked on the memory bound (then merging
	// frees memory and it moves on).
	stuck := holder != nil && time.Since(holder.handedAt) >= stuckAfter
	// Woken waiters keep the flag until they run: blocked only if the bound
	// still holds them.
	blocked := holder != nil && holder.waiting && s.inMem >= s.opts.MaxBufferedRecords
	s.mu.Unlock()
	pendingBefore := m.pending
	if req != nil {
		w = maxT
	}
	m.merge(w)
	progressed := m.pending < pendingBefore
	// Records above w wait for the writer holding w. Past half the memory
	// budget, stop waiting (a later smaller t then starts a new run) if
	// that writer is idle, or blocked on the memory bound with nothing
	// left to merge below w (it cannot move until we merge past it).
	if m.pending >= s.opts.MaxBufferedRecords/2 && ((blocked && !progressed) || (!blocked && stuck)) {
		m.merge(maxT)
	}
	// Merged records leave the writers' budget (chunks in flight are
	// bounded by the jobs channel instead): a partial chunk waiting for
	// more records must not keep writers blocked.
	if merged := pendingBefore - m.pending; merged > 0 {
		s.mu.Lock()
		s.inMem -= merged
		s.cond.Broadcast()
		s.mu.Unlock()
	}
	if req != nil {
		m.emit(req)
	}
}

// merge moves every pending record with t <= w into out, in t order.
func (m *merger) merge(w int64) {
	h := m.heap[:0]
	for _, src := range m.srcs {
		if len(src.batches) > 0 && src.head() <= w {
			h = append(h, src)
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(h, i)
	}
	for len(h) > 0 {
		src := h[0]
		limit := w
		if len(h) > 1 {
			second := h[1].head()
			if len(h) > 2 {
				second = min(second, h[2].head())
			}
			limit = min(limit, second)
		}
		b := src.batches[0]
		i := src.pos
		if b[i].t < m.last && len(m.out) > 0 {
			m.emit(nil) // out of order after a forced merge: start a new run
		}
		room := cap(m.out) - len(m.out)
		j := i
		for j < len(b) && j-i < room && b[j].t <= limit {
			j++
		}
		m.out = append(m.out, b[i:j]...)
		m.last = b[j-1].t
		m.pending -= j - i
		if j == len(b) {
			m.s.putBatch(b)
			src.batches[0] = nil
			src.batches = src.batches[1:]
			src.pos = 0
		} else {
			src.pos = j
		}
		if len(m.out) == cap(m.out) {
			m.emit(nil)
		}
		if len(src.batches) == 0 || src.head() > w {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		if len(h) > 0 {
			down(h, 0)
		}
	}
	clear(h[:cap(h)])
	m.heap = h[:0]
}

func down(h []*source, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && h[r].head() < h[l].head() {
			c = r
		}
		if h[i].head() <= h[c].head() {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// emit sends the current chunk (and req, if any) to the encoder.
func (m *merger) emit(req *flushReq) {
	if len(m.out) == 0 && req == nil {
		return
	}
	job := chunkJob{recs: m.out, req: req}
	select {
	case m.s.jobs <- job:
	case <-m.s.done:
		if req != nil {
			req.done <- ErrClosed
		}
		return
	}
	m.out = m.s.getChunk()
}
