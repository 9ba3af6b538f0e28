// Package embedded is the registry's default durable store: a pebble LSM
// in one directory. A commit is one pebble batch written to the write-ahead
// log with one fsync, however many requests it carries; the revision counter
// lives in the same batch, so revisions follow the order of commits.
package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble"

	"github.com/sextant-mesh/sextant/internal/store"
)

var (
	instPrefix = []byte("i/")
	revKey     = []byte("m/revision")
)

// Store is a pebble-backed store. Commit is called by one goroutine at a
// time (the registry's committer); Load before any Commit.
type Store struct {
	mu  sync.Mutex // guards db against Close during Commit
	db  *pebble.DB
	rev int64
}

// Open creates or opens the store in dir.
func Open(dir string) (*Store, error) {
	opts := &pebble.Options{
		Logger:       quietLogger{},
		MemTableSize: 64 << 20,
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: open %s: %w", dir, err)
	}
	s := &Store{db: db}
	v, closer, err := db.Get(revKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		db.Close()
		return nil, fmt.Errorf("embedded: read revision: %w", err)
	default:
		if len(v) != 8 {
			closer.Close()
			db.Close()
			return nil, fmt.Errorf("embedded: revision record has %d bytes, want 8", len(v))
		}
		s.rev = int64(binary.BigEndian.Uint64(v))
		closer.Close()
	}
	return s, nil
}

// Revision is the revision of the last commit.
func (s *Store) Revision() int64 { return s.rev }

// Commit writes txns as one atomic batch; txn i gets revision first+i.
// With sync the batch is fsynced before Commit returns.
func (s *Store) Commit(txns []store.Txn, sync bool) (first int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return 0, store.ErrClosed
	}
	b := s.db.NewBatch()
	defer b.Close()
	rev := s.rev
	key := make([]byte, 0, 64)
	var val []byte
	for _, t := range txns {
		rev++
		for _, op := range t.Ops {
			key = append(append(key[:0], instPrefix...), op.ID...)
			if op.Value == nil {
				if err := b.Delete(key, nil); err != nil {
					return 0, fmt.Errorf("embedded: delete %s: %w", op.ID, err)
				}
				continue
			}
			val = binary.BigEndian.AppendUint64(val[:0], uint64(rev))
			val = append(val, op.Value...)
			if err := b.Set(key, val, nil); err != nil { // pebble copies key and value
				return 0, fmt.Errorf("embedded: put %s: %w", op.ID, err)
			}
		}
	}
	var rv [8]byte
	binary.BigEndian.PutUint64(rv[:], uint64(rev))
	if err := b.Set(revKey, rv[:], nil); err != nil {
		return 0, fmt.Errorf("embedded: set revision: %w", err)
	}
	wo := pebble.NoSync
	if sync {
		wo = pebble.Sync
	}
	if err := b.Commit(wo); err != nil {
		return 0, fmt.Errorf("embedded: commit: %w", err)
	}
	first = s.rev + 1
	s.rev = rev
	return first, nil
}

// Load calls fn for every stored record, in id order. The record's slices
// are only valid during the call.
func (s *Store) Load(fn func(store.Record) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return store.ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: instPrefix, UpperBound: []byte("i0")})
	if err != nil {
		return fmt.Errorf("embedded: iterate: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(v) < 8 {
			return fmt.Errorf("embedded: record %q has %d bytes, want at least 8", k, len(v))
		}
		rec := store.Record{ID: string(k[len(instPrefix):]), Revision: int64(binary.BigEndian.Uint64(v)), Value: v[8:]}
		if err := fn(rec); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("embedded: iterate: %w", err)
	}
	return nil
}

// Close flushes nothing more (every answered commit is in the log) and
// releases the directory.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
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
