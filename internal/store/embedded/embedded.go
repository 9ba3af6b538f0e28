// Package embedded is Sextant's default durable store: a pebble LSM in one
// directory. A commit is one pebble batch written to the write-ahead log with
// one fsync, however many requests it carries; the revision counter lives in
// the same batch, so revisions follow the order of commits. Records are keyed
// by their kind's byte, '/', and their key (instances keep the "i/" prefix of
// wave one, so old data directories open unchanged).
//
// The stream of changes (Follow) is kept in memory: everything committed
// since the store was opened, bounded. One process owns the directory, so
// every follower is in this process and starts from a Load.
package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/sextant-mesh/sextant/internal/store"
)

var revKey = []byte("m/revision")

// Options tune the store; zero values are sensible defaults.
type Options struct {
	// FeedOps bounds the ops kept in memory for Follow (default 1<<20);
	// a follower further behind gets ErrCompacted.
	FeedOps int
	// Reserve is the free space, in bytes, the store keeps on its file
	// system (space.go): a commit that finds less is refused. 0 is
	// DefaultReserve; negative turns the check off.
	Reserve int64
	// Repair truncates the newest write-ahead log at damage before its
	// tail, dropping what follows (Repaired says what), instead of
	// refusing to open (walcheck.go).
	Repair bool
}

// Store is a pebble-backed store. Commit is called by one goroutine at a
// time (the write engine's committer); Load and Follow from any goroutine.
type Store struct {
	mu   sync.Mutex // guards db against Close during Commit and Load
	db   *pebble.DB
	dir  string
	rev  int64
	feed feed

	pubMu   sync.Mutex
	pending []*commitWait // committed in order, not yet in the feed

	reserve  uint64
	dirFile  *os.File   // the directory, for its free space (space.go)
	readOnly bool       // opened read-only for lack of space (space.go)
	panicked bool       // pebble panicked in a commit: its locks may be held
	repaired *WALRepair // what Open's repair dropped

	failMu sync.Mutex // not s.mu: set by durable, which Load calls under s.mu
	failed error      // a write pebble failed: no more commits
}

// Open creates or opens the store in dir.
func Open(dir string) (*Store, error) { return OpenWith(dir, Options{}) }

// OpenWith creates or opens the store in dir with opts.
func OpenWith(dir string, opts Options) (*Store, error) {
	if opts.FeedOps <= 0 {
		opts.FeedOps = 1 << 20
	}
	s := &Store{dir: dir}
	switch {
	case opts.Reserve == 0:
		s.reserve = DefaultReserve
	case opts.Reserve > 0:
		s.reserve = uint64(opts.Reserve)
	}
	if hasDB(dir) {
		// Checked under the directory's lock, so that a repair never cuts
		// the log of a store another process has open.
		lock, err := privateFS{vfs.Default}.Lock(filepath.Join(dir, "LOCK"))
		if err != nil {
			return nil, fmt.Errorf("embedded: lock %s: %w", dir, err)
		}
		s.repaired, err = checkWAL(dir, opts.Repair)
		lock.Close()
		if err != nil {
			return nil, err
		}
		if s.reserve > 0 {
			free, err := freeSpace(dir)
			if err != nil {
				return nil, err
			}
			// Without room to replay the log, replaying it would fail
			// half-way and leave tables behind: read-only, it is
			// replayed in memory only.
			s.readOnly = free < s.openNeeds()
		}
	}
	db, err := pebble.Open(dir, s.pebbleOptions(s.readOnly))
	if err != nil {
		return nil, fmt.Errorf("embedded: open %s: %w", dir, err)
	}
	rev, err := readRevision(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	if s.reserve > 0 {
		if s.dirFile, err = os.Open(dir); err != nil {
			db.Close()
			return nil, fmt.Errorf("embedded: open %s: %w", dir, err)
		}
	}
	s.db, s.rev = db, rev
	s.feed.init(rev, opts.FeedOps)
	return s, nil
}

func (s *Store) pebbleOptions(readOnly bool) *pebble.Options {
	return &pebble.Options{Logger: quietLogger{}, MemTableSize: 64 << 20, Levels: levels(), ReadOnly: readOnly,
		FS: privateFS{vfs.Default}}
}

// Repaired is what opening the store repaired in its newest log (nil:
// nothing).
func (s *Store) Repaired() *WALRepair { return s.repaired }

// levels are pebble's defaults (files of 2 MB doubling per level, snappy)
// except that L0 and L1 are not compressed: what a flush writes there is
// soon read and rewritten by a compaction, so compressing it spent CPU twice
// (the batch register bench: ~10% less server CPU per instance, ~20% more
// disk while the data is recent; docs/perf/registry.md). Blocks are 32 KiB, not
// 4: a table is written through a 4 KiB buffer, one write(2) per block, and
// those syscalls were ~8% of the server's CPU under batch registers. The
// registry reads the store by scans; a point read (a conditional write's
// check) decodes a larger block.
func levels() []pebble.LevelOptions {
	ls := make([]pebble.LevelOptions, 7)
	for i := range ls {
		ls[i].TargetFileSize = 2 << 20 << i
		ls[i].BlockSize = 32 << 10
		ls[i].Compression = pebble.SnappyCompression
		if i < 2 {
			ls[i].Compression = pebble.NoCompression
		}
	}
	return ls
}

type getter interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

func readRevision(r getter) (int64, error) {
	v, closer, err := r.Get(revKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("embedded: read revision: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("embedded: revision record has %d bytes, want 8", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func prefix(k store.Kind) []byte { return []byte{byte(k), '/'} }

func appendKey(b []byte, k store.Kind, key string) []byte {
	return append(append(b, byte(k), '/'), key...)
}

// Revision is the revision of the last commit.
func (s *Store) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Commit writes txns as one atomic batch. Each txn whose checks hold takes
// the next revision, in order; one whose checks fail writes nothing and
// gets a ConflictError. With sync the batch is fsynced before Commit
// returns. The committed txns are then published to followers. An error
// (rather than per-txn results) means nothing was written.
func (s *Store) Commit(txns []store.Txn, sync bool) ([]store.Result, error) {
	res, durable, err := s.CommitAsync(txns, sync)
	if err != nil {
		return nil, err
	}
	return res, durable()
}

// CommitAsync is Commit that returns once the batch is written and ordered,
// before its fsync: durable waits for it (and every earlier commit), then
// hands its changes to followers, so that nothing reaches them before it is
// on disk. Each durable must be called (Close calls those left). The
// committer plans its next batch while the disk syncs this one; pebble
// groups their syncs.
func (s *Store) CommitAsync(txns []store.Txn, sync bool) ([]store.Result, func() error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil, nil, s.closed()
	}
	if err := s.roomLocked(sync); err != nil {
		return nil, nil, err
	}
	b := s.db.NewBatchWithSize(batchSize(txns))
	queued := false
	defer func() {
		if !queued {
			b.Close()
		}
	}()
	res := make([]store.Result, len(txns))
	rev := s.rev
	var (
		key     = make([]byte, 0, 64)
		written map[string]int64 // keys put (revision) or deleted (0) earlier in this batch
		changes = make([]store.Change, 0, len(txns))
	)
scan:
	for _, t := range txns {
		for _, op := range t.Ops {
			if op.Check {
				written = make(map[string]int64) // only batches with checks track their writes
				break scan
			}
		}
	}
	for i, t := range txns {
		if len(t.Ops) == 0 {
			continue
		}
		if err := s.check(t, written, &res[i]); err != nil {
			return nil, nil, err
		}
		if res[i].Err != nil {
			continue
		}
		rev++
		res[i].Revision = rev
		for _, op := range t.Ops {
			if !op.Kind.Valid() {
				return nil, nil, fmt.Errorf("embedded: op on unknown %v", op.Kind)
			}
			key = appendKey(key[:0], op.Kind, op.Key)
			if written != nil {
				if op.Value == nil {
					written[string(key)] = 0
				} else {
					written[string(key)] = rev
				}
			}
			if op.Value == nil {
				if err := b.Delete(key, nil); err != nil {
					return nil, nil, fmt.Errorf("embedded: delete %v %q: %w", op.Kind, op.Key, err)
				}
				continue
			}
			// Written in place in the batch: the revision, then the value.
			d := b.SetDeferred(len(key), 8+len(op.Value))
			copy(d.Key, key)
			binary.BigEndian.PutUint64(d.Value, uint64(rev))
			copy(d.Value[8:], op.Value)
			if err := d.Finish(); err != nil {
				return nil, nil, fmt.Errorf("embedded: put %v %q: %w", op.Kind, op.Key, err)
			}
		}
		changes = append(changes, store.Change{Revision: rev, Ops: t.Ops})
	}
	if rev == s.rev {
		return res, s.waitFor(nil), nil // nothing to write
	}
	var rv [8]byte
	binary.BigEndian.PutUint64(rv[:], uint64(rev))
	if err := b.Set(revKey, rv[:], nil); err != nil {
		return nil, nil, fmt.Errorf("embedded: set revision: %w", err)
	}
	cw := &commitWait{changes: changes}
	if err := s.applyLocked(b, sync); err != nil {
		if s.panicked {
			queued = true // in pebble's hands, in a state unknown
			return nil, nil, err
		}
		if sync {
			_ = b.SyncWait() // a batch handed to the log must be waited for before Close
		}
		return nil, nil, s.fail(fmt.Errorf("commit: %w", err))
	}
	if sync {
		cw.b, queued = b, true
	}
	s.rev = rev
	now := time.Now().UnixNano()
	for i := range changes {
		changes[i].Time = now
	}
	s.pubMu.Lock()
	s.pending = append(s.pending, cw)
	s.pubMu.Unlock()
	return res, s.waitFor(cw), nil
}

// batchSize is about the bytes txns take in a batch, so that it is made
// once at its size rather than doubled and copied on the way.
func batchSize(txns []store.Txn) int {
	n := 64
	for _, t := range txns {
		for _, op := range t.Ops {
			n += len(op.Key) + len(op.Value) + 32 // kind, revision, lengths
		}
	}
	return n
}

// commitWait is a commit on its way to disk and to the feed.
type commitWait struct {
	b       *pebble.Batch // nil for a commit without fsync
	changes []store.Change
	once    sync.Once
	err     error
	synced  atomic.Bool // after err is set
}

func (cw *commitWait) sync() {
	cw.once.Do(func() {
		if cw.b != nil {
			cw.err = cw.b.SyncWait()
			cw.b.Close()
		}
		cw.synced.Store(true)
	})
}

// waitFor returns the durable function of cw (nil: a commit that wrote
// nothing, durable once every earlier one is).
func (s *Store) waitFor(cw *commitWait) func() error {
	return func() error {
		// Every earlier commit first: the feed is in commit order, and a
		// commit without fsync must not be seen before an earlier one is
		// on disk.
		s.pubMu.Lock()
		var prefix []*commitWait
		for _, p := range s.pending {
			prefix = append(prefix, p)
			if p == cw {
				break
			}
		}
		s.pubMu.Unlock()
		for _, p := range prefix {
			p.sync()
		}
		s.pubMu.Lock()
		defer s.pubMu.Unlock()
		for len(s.pending) > 0 && s.pending[0].synced.Load() && s.pending[0].err == nil {
			s.feed.publish(s.pending[0].changes)
			s.pending[0] = nil
			s.pending = s.pending[1:]
		}
		for _, p := range prefix {
			if p.err != nil {
				return s.fail(fmt.Errorf("sync the log: %w", p.err))
			}
		}
		return nil
	}
}

// check evaluates t's conditions against the store and the batch's earlier
// txns; a failed one is recorded in r.
func (s *Store) check(t store.Txn, written map[string]int64, r *store.Result) error {
	var key []byte
	for _, op := range t.Ops {
		if !op.Check {
			continue
		}
		key = appendKey(key[:0], op.Kind, op.Key)
		have, ok := written[string(key)]
		if !ok {
			v, closer, err := s.db.Get(key)
			switch {
			case errors.Is(err, pebble.ErrNotFound):
			case err != nil:
				return fmt.Errorf("embedded: read %v %q: %w", op.Kind, op.Key, err)
			default:
				if len(v) >= 8 {
					have = int64(binary.BigEndian.Uint64(v))
				}
				closer.Close()
			}
		}
		if have != op.IfRevision {
			r.Err = &store.ConflictError{Kind: op.Kind, Key: op.Key, Want: op.IfRevision, Have: have}
			return nil
		}
	}
	return nil
}

// Load calls fn for every stored record of kinds, kind by kind in the order
// given and in key order within a kind, all from one consistent snapshot,
// and returns the revision of that snapshot. The record's slices are only
// valid during the call.
func (s *Store) Load(kinds []store.Kind, fn func(store.Record) error) (int64, error) {
	s.mu.Lock()
	if s.db == nil {
		s.mu.Unlock()
		return 0, store.ErrClosed
	}
	if s.panicked {
		s.mu.Unlock() // pebble's own locks may be held: its snapshot could hang
		return 0, s.failure()
	}
	// Commits still syncing are in pebble but not yet in the feed: the
	// snapshot must not see past what a follower from its revision gets.
	if err := s.waitFor(nil)(); err != nil {
		s.mu.Unlock()
		return 0, err
	}
	snap := s.db.NewSnapshot()
	s.mu.Unlock()
	defer snap.Close()
	rev, err := readRevision(snap)
	if err != nil {
		return 0, err
	}
	for _, k := range kinds {
		lo := prefix(k)
		hi := []byte{byte(k), '/' + 1}
		it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return 0, fmt.Errorf("embedded: iterate %v: %w", k, err)
		}
		for it.First(); it.Valid(); it.Next() {
			key, v := it.Key(), it.Value()
			if len(v) < 8 {
				it.Close()
				return 0, fmt.Errorf("embedded: record %q has %d bytes, want at least 8", key, len(v))
			}
			rec := store.Record{Kind: k, Key: string(key[len(lo):]), Revision: int64(binary.BigEndian.Uint64(v)), Value: v[8:]}
			if err := fn(rec); err != nil {
				it.Close()
				return 0, err
			}
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return 0, fmt.Errorf("embedded: iterate %v: %w", k, err)
		}
	}
	return rev, nil
}

// Follow returns a feed of every change committed after revision since.
// ErrCompacted if since is older than what the store keeps in memory (it
// keeps what was committed since it was opened, bounded by Options.FeedOps).
func (s *Store) Follow(since int64) (store.Feed, error) {
	return s.feed.follow(since)
}

// Close releases the directory and ends every feed (their Next answers
// ErrClosed). Every answered commit is already in the log.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dirFile != nil {
		s.dirFile.Close()
		s.dirFile = nil
	}
	if s.db == nil {
		return s.failure()
	}
	if s.panicked {
		// Pebble may hold its own locks: closing it could hang. The
		// process is on its way out; the log is replayed at the next open.
		s.db = nil
		return fmt.Errorf("embedded: close: not closed after a failed write: %w", s.failure())
	}
	s.pubMu.Lock()
	for _, p := range s.pending {
		p.sync() // their batches must be waited for before the db closes
	}
	s.pending = nil
	s.pubMu.Unlock()
	s.feed.close()
	// The memtable goes to a table now, so that the next Open need not
	// replay the write-ahead log into a memtable and flush it before the
	// registry can load (~20% of restarting 205,000 instances). After a
	// crash Open replays as before. Not when the directory is gone: pebble
	// takes a missing log file on flush as fatal, and a close must not
	// bring the process down (the log it would flush is gone too).
	// Nor when it is read-only or failed a write (a flush could not
	// succeed; the next open replays the log).
	var err error
	if _, statErr := os.Stat(s.dir); statErr == nil && !s.readOnly && s.failure() == nil {
		err = s.db.Flush()
	}
	err = errors.Join(err, s.db.Close())
	s.db = nil
	if err != nil {
		return fmt.Errorf("embedded: close: %w", err)
	}
	return nil
}

// quietLogger keeps pebble's informational chatter out of the server's log;
// errors still surface through returned errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("embedded: pebble: "+format, args...))
}
