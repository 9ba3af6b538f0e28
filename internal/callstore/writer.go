package callstore

import (
	"fmt"
	"math"
	"sync"
	"time"
)

const (
	minT = math.MinInt64
	maxT = math.MaxInt64
)

// record is one record in memory, between Put and disk.
type record struct {
	t, a int64
	body [BodySize]byte
}

// Writer puts records in non-decreasing t. It buffers up to
// Options.WriterBatch records, then hands the batch to the merger. A Writer
// is safe for concurrent use, but t order is only meaningful from one
// goroutine.
type Writer struct {
	s  *Store
	mu sync.Mutex // guards buf, last, released

	buf      []record
	last     int64
	released bool

	// Guarded by s.mu.
	queue      [][]record // handed-off batches the merger has not taken yet
	lastHanded int64      // t of the last record handed off: later ones are >= it
	floor      int64      // the store's highest handed t when this writer was made
	gone       bool       // released: no more records will come
	handedAt   time.Time  // last hand-off (or creation)
	waiting    bool       // blocked on the memory bound: busy, not idle
}

// Put adds one record. It returns ErrTimeBackwards (and stores nothing) if t
// is below the t of this writer's previous Put, ErrClosed after the store or
// the writer is closed, and the store's background I/O error if it failed.
// It blocks while Options.MaxBufferedRecords records wait to be written.
func (w *Writer) Put(t, a int64, body [BodySize]byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.released {
		return fmt.Errorf("%w: writer closed", ErrClosed)
	}
	if w.s.closed.Load() {
		return ErrClosed
	}
	if t < w.last {
		return fmt.Errorf("%w: %d after %d", ErrTimeBackwards, t, w.last)
	}
	w.last = t
	w.buf = append(w.buf, record{t: t, a: a, body: body})
	if len(w.buf) < cap(w.buf) {
		return nil
	}
	return w.handOff(true)
}

// Close hands the buffered records to the merger and releases the writer,
// so it no longer holds back the merge. It does not make them durable (use
// Store.Sync). Close is idempotent.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.released {
		return nil
	}
	w.released = true
	err := w.handOff(false)
	s := w.s
	s.mu.Lock()
	w.gone = true
	s.mu.Unlock()
	s.wakeMerger()
	return err
}

// handOff passes the buffered batch to the merger; with wait it then blocks
// while too many records are in memory. Called with w.mu held.
func (w *Writer) handOff(wait bool) error {
	s := w.s
	if len(w.buf) == 0 {
		s.mu.Lock()
		err := s.failed
		s.mu.Unlock()
		return err
	}
	b := w.buf
	s.mu.Lock()
	if s.failed != nil {
		err := s.failed
		s.mu.Unlock()
		w.buf = b[:0]
		return err
	}
	w.queue = append(w.queue, b)
	w.lastHanded = b[len(b)-1].t
	w.handedAt = time.Now()
	s.maxHanded = max(s.maxHanded, w.lastHanded)
	s.inMem += len(b)
	s.wakeMerger()
	for i := 0; wait && s.inMem >= s.opts.MaxBufferedRecords && !s.closed.Load() && s.failed == nil; i++ {
		w.waiting = true
		s.cond.Wait()
		w.waiting = false
	}
	s.mu.Unlock()
	w.buf = s.getBatch()
	return nil
}

func (s *Store) wakeMerger() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
