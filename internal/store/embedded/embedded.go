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
	"sync"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/sextant-mesh/sextant/internal/store"
)

var revKey = []byte("m/revision")

// Options tune the store; zero values are sensible defaults.
type Options struct {
	// FeedOps bounds the ops kept in memory for Follow (default 1<<20);
	// a follower further behind gets ErrCompacted.
	FeedOps int
}

// Store is a pebble-backed store. Commit is called by one goroutine at a
// time (the registry's committer); Load and Follow from any goroutine.
type Store struct {
	mu   sync.Mutex // guards db against Close during Commit and Load
	db   *pebble.DB
	rev  int64
	feed feed
}

// Open creates or opens the store in dir.
func Open(dir string) (*Store, error) { return OpenWith(dir, Options{}) }

// OpenWith creates or opens the store in dir with opts.
func OpenWith(dir string, opts Options) (*Store, error) {
	if opts.FeedOps <= 0 {
		opts.FeedOps = 1 << 20
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}, MemTableSize: 64 << 20})
	if err != nil {
		return nil, fmt.Errorf("embedded: open %s: %w", dir, err)
	}
	rev, err := readRevision(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &Store{db: db, rev: rev}
	s.feed.init(rev, opts.FeedOps)
	return s, nil
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil, store.ErrClosed
	}
	b := s.db.NewBatch()
	defer b.Close()
	res := make([]store.Result, len(txns))
	rev := s.rev
	var (
		key     = make([]byte, 0, 64)
		val     []byte
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
			return nil, err
		}
		if res[i].Err != nil {
			continue
		}
		rev++
		res[i].Revision = rev
		for _, op := range t.Ops {
			if !op.Kind.Valid() {
				return nil, fmt.Errorf("embedded: op on unknown %v", op.Kind)
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
					return nil, fmt.Errorf("embedded: delete %v %q: %w", op.Kind, op.Key, err)
				}
				continue
			}
			val = binary.BigEndian.AppendUint64(val[:0], uint64(rev))
			val = append(val, op.Value...)
			if err := b.Set(key, val, nil); err != nil { // pebble copies key and value
				return nil, fmt.Errorf("embedded: put %v %q: %w", op.Kind, op.Key, err)
			}
		}
		changes = append(changes, store.Change{Revision: rev, Ops: t.Ops})
	}
	if rev == s.rev {
		return res, nil // nothing to write
	}
	var rv [8]byte
	binary.BigEndian.PutUint64(rv[:], uint64(rev))
	if err := b.Set(revKey, rv[:], nil); err != nil {
		return nil, fmt.Errorf("embedded: set revision: %w", err)
	}
	wo := pebble.NoSync
	if sync {
		wo = pebble.Sync
	}
	if err := b.Commit(wo); err != nil {
		return nil, fmt.Errorf("embedded: commit: %w", err)
	}
	s.rev = rev
	now := time.Now().UnixNano()
	for i := range changes {
		changes[i].Time = now
	}
	s.feed.publish(changes)
	return res, nil
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
	if s.db == nil {
		return nil
	}
	s.feed.close()
	err := s.db.Close()
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
