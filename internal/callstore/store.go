package callstore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// BodySize is the size of a record body in stores this version creates:
// the race's 34 bytes (seed 003) and a 16-byte trace id (calllog's layout
// v3); the index header records it (format.go), so that a later version
// may grow it and still read these. A store with smaller bodies reads back
// zero-padded to BodySize, and bodies put into it are cut to its size.
const BodySize = 50

// Message is one record.
type Message struct {
	T    int64
	A    int64
	Body [BodySize]byte
}

// Sentinel errors; every error the package returns wraps one of them or an
// I/O error.
var (
	ErrClosed        = errors.New("callstore: store closed")
	ErrBadRange      = errors.New("callstore: bad range")
	ErrTimeBackwards = errors.New("callstore: t went backwards on this writer")
	ErrCorrupt       = errors.New("callstore: corrupt data")
	ErrBadOptions    = errors.New("callstore: bad options")
	ErrLocked        = errors.New("callstore: directory in use by another store")
)

// Store is an open call-log store. All methods are safe for concurrent use.
//
// Goroutines: Open starts two, both owned by the Store and stopped by Close:
// the merger (merges writer batches into t order and cuts chunks) and the
// encoder (encodes, appends and publishes chunks, and fsyncs on Sync).
//
// Lock order: Writer.mu, then Store.mu. closeMu is taken (shared) by every
// public method before either and (exclusively) by Close.
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger

	idxF, taF, bodyF *os.File
	// bodySize is the body size of this store's files (the header's): set
	// by recover in Open, never changed after.
	bodySize int

	closeMu sync.RWMutex
	closed  atomic.Bool

	// view is the immutable index snapshot queries read.
	view atomic.Pointer[view]

	mu        sync.Mutex
	cond      *sync.Cond // signalled when inMem drops or the store fails
	writers   []*Writer  // registered, including released ones with queued data
	inMem     int        // records handed to the merger and not yet merged
	maxHanded int64      // highest t handed to the merger so far
	failed    error      // first background I/O error; the store is read-only after it

	wake     chan struct{}  // writer → merger: a batch was handed off
	flushReq chan *flushReq // Sync/Close → merger
	jobs     chan chunkJob  // merger → encoder
	done     chan struct{}  // closed by Close: goroutines stop
	wg       sync.WaitGroup

	batchPool sync.Pool // *[]record of cap WriterBatch
	chunkPool sync.Pool // *[]record of cap ChunkRecords
	scratch   sync.Pool // *queryScratch

	// Owned by the encoder goroutine after Open.
	enc encoder
}

type flushReq struct {
	done chan error
	// visibleOnly: publish the records but do not fsync (Flush).
	visibleOnly bool
}

// Open opens or creates the store in dir, recovering from a crash: a torn or
// unsynced tail is checked against its checksums and cut. It fails with
// ErrLocked if another Store has dir open.
func Open(dir string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("callstore: open: %w", err)
	}
	s := &Store{
		dir:       dir,
		opts:      opts,
		log:       opts.Logger,
		maxHanded: minT,
		wake:      make(chan struct{}, 1),
		flushReq:  make(chan *flushReq),
		jobs:      make(chan chunkJob, 2),
		done:      make(chan struct{}),
	}
	s.cond = sync.NewCond(&s.mu)
	if err := s.openFiles(); err != nil {
		s.closeFiles()
		return nil, err
	}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.wg.Add(2)
	go s.mergeLoop()
	go s.encodeLoop()
	return s, nil
}

func (s *Store) openFiles() error {
	var err error
	open := func(name string) *os.File {
		if err != nil {
			return nil
		}
		var f *os.File
		f, err = os.OpenFile(filepath.Join(s.dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			err = fmt.Errorf("callstore: open %s: %w", name, err)
		}
		return f
	}
	s.idxF = open(indexName)
	s.taF = open(taName)
	s.bodyF = open(bodyName)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(s.idxF.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("%w: %s", ErrLocked, s.dir)
		}
		return fmt.Errorf("callstore: lock %s: %w", s.dir, err)
	}
	return nil
}

// BodySize is the body size of this store's files: BodySize, or a smaller
// one for a store an earlier version created (the rest of a body put into it
// is not kept; the rest of a body read from it is zeros).
func (s *Store) BodySize() int { return s.bodySize }

func (s *Store) closeFiles() {
	for _, f := range []*os.File{s.idxF, s.taF, s.bodyF} {
		if f != nil {
			f.Close()
		}
	}
}

// Writer returns a new writer. Each writer's t must not decrease; use one
// writer per goroutine. Close writers you stop using: an idle writer holds
// back the merge until MaxBufferedRecords/2 records wait.
func (s *Store) Writer() (*Writer, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &Writer{s: s, last: minT, lastHanded: minT, floor: s.maxHanded, handedAt: time.Now()}
	w.buf = s.getBatch()
	s.writers = append(s.writers, w)
	return w, nil
}

// Sync makes every record put before it was called durable and visible to
// queries. It returns the first background I/O error, if any.
func (s *Store) Sync() error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	return s.sync(false)
}

// Flush makes every record put before it was called visible to queries,
// like Sync, but without fsync and without a sync entry: it costs the
// writes, not the disk flushes. After a crash, flushed records are kept if
// they were written whole (the unsynced tail is checked, docs/callstore.md).
func (s *Store) Flush() error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	return s.sync(true)
}

func (s *Store) sync(visibleOnly bool) error {
	s.mu.Lock()
	ws := append([]*Writer(nil), s.writers...)
	s.mu.Unlock()
	for _, w := range ws {
		w.mu.Lock()
		w.handOff(false)
		w.mu.Unlock()
	}
	req := &flushReq{done: make(chan error, 1), visibleOnly: visibleOnly}
	s.flushReq <- req
	return <-req.done
}

// Close flushes and syncs everything put, stops the goroutines and closes
// the files. Puts and queries after Close return ErrClosed. Close is
// idempotent; only the first call returns the flush error.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	// Wake writers blocked on backpressure so they see closed; the merger is
	// still running, so their batches drain.
	s.mu.Lock()
	s.cond.Broadcast()
	s.mu.Unlock()
	err := s.sync(false)
	s.closeMu.Lock() // waits for queries and Puts in flight
	close(s.done)
	s.wg.Wait()
	s.closeFiles()
	s.closeMu.Unlock()
	return err
}

func (s *Store) fail(err error) {
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
		s.log.Error("callstore: background write failed; store is read-only", "err", err)
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *Store) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (s *Store) getBatch() []record {
	if p, ok := s.batchPool.Get().(*[]record); ok {
		return (*p)[:0]
	}
	return make([]record, 0, s.opts.WriterBatch)
}

func (s *Store) putBatch(b []record) {
	if cap(b) != s.opts.WriterBatch {
		return
	}
	b = b[:0]
	s.batchPool.Put(&b)
}

func (s *Store) getChunk() []record {
	if p, ok := s.chunkPool.Get().(*[]record); ok {
		return (*p)[:0]
	}
	return make([]record, 0, s.opts.ChunkRecords)
}

func (s *Store) putChunk(b []record) {
	if cap(b) != s.opts.ChunkRecords {
		return
	}
	b = b[:0]
	s.chunkPool.Put(&b)
}
