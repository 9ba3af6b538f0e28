package embedded

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble"

	"github.com/sextant-mesh/sextant/internal/store"
)

// Pebble takes a failed write of its log as fatal: the log writer keeps the
// error (every later commit fails with it), and the next log rotation or
// commit error panics the process. A restart on a full disk then fails in
// the log's replay, which flushes it to tables, and leaves those tables
// behind. So the store keeps pebble away from a full disk: each commit
// first checks the free space of the data directory's file system and is
// refused below the reserve (nothing written, store.SpaceError); a store
// opened without room for its log's replay opens read-only (reads served,
// writes refused) and reopens for writing by itself at the first write
// that finds room. A write error that gets through anyway (another process
// filled the disk between two checks) fails the store's writes with
// store.ErrWriteFailed rather than bringing the process down.

// DefaultReserve is the free space the store keeps by default: room for a
// memtable's flush (64 MiB), the next log's preallocation (~70 MiB) and a
// compaction of what the flush wrote.
const DefaultReserve = 256 << 20

// freeSpace is the space free for an unprivileged writer on dir's file
// system.
func freeSpace(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("embedded: free space of %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// free is the space free on the store's file system, through the
// directory it holds open: fstatfs costs a third of a statfs by path
// (0.75 against 2.3 us here; BenchmarkFree), once per commit.
func (s *Store) free() (uint64, error) {
	if s.dirFile == nil {
		return freeSpace(s.dir)
	}
	var st syscall.Statfs_t
	if err := syscall.Fstatfs(int(s.dirFile.Fd()), &st); err != nil {
		return 0, fmt.Errorf("embedded: free space of %s: %w", s.dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// walBytes is the size of dir's write-ahead logs: about what replaying them
// at open writes to tables.
func walBytes(dir string) uint64 {
	entries, _ := os.ReadDir(dir)
	var n uint64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		if fi, err := e.Info(); err == nil {
			n += uint64(fi.Size())
		}
	}
	return n
}

// openNeeds is the free space opening dir for writing needs: its logs'
// replay and the reserve.
func (s *Store) openNeeds() uint64 { return s.reserve + walBytes(s.dir) }

// hasDB reports whether dir holds a store already (pebble's CURRENT).
func hasDB(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "CURRENT"))
	return err == nil
}

// roomLocked checks, before a commit, that the store may write: it has not
// failed, and the disk has room (reopening for writing a store opened
// read-only once it has). A commit without fsync (health changes, judged
// again after a crash) may go on into half the reserve: small, and what
// keeps xDS from sending calls to instances whose TTL expired. Called with
// s.mu held.
func (s *Store) roomLocked(sync bool) error {
	if err := s.failure(); err != nil {
		return err
	}
	if s.reserve == 0 {
		return nil
	}
	free, err := s.free()
	if err != nil {
		return err
	}
	need := s.reserve
	switch {
	case s.readOnly:
		need = s.openNeeds()
	case !sync:
		need = s.reserve / 2
	}
	if free < need {
		return &store.SpaceError{Dir: s.dir, Free: free, Reserve: need, ReadOnly: s.readOnly}
	}
	if s.readOnly {
		return s.reopenLocked()
	}
	return nil
}

// reopenLocked reopens a store opened read-only for writing: its log is
// replayed and flushed, then commits go on from the same revision.
func (s *Store) reopenLocked() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("embedded: close the read-only store: %w", err)
	}
	db, err := pebble.Open(s.dir, s.pebbleOptions(false))
	if err != nil {
		// Back to reading: the catalog is in memory, reads go on.
		ro, roErr := pebble.Open(s.dir, s.pebbleOptions(true))
		if roErr != nil {
			s.db = nil
			return s.fail(fmt.Errorf("reopen for writing: %w (and read-only: %w)", err, roErr))
		}
		s.db = ro
		return fmt.Errorf("embedded: reopen %s for writing: %w", s.dir, err)
	}
	rev, err := readRevision(db)
	if err == nil && rev != s.rev {
		err = fmt.Errorf("embedded: reopened %s for writing at revision %d, read-only it was at %d", s.dir, rev, s.rev)
	}
	if err != nil {
		db.Close()
		s.db = nil
		return s.fail(err)
	}
	s.db, s.readOnly = db, false
	return nil
}

// FreeBytes is the free space of the store's file system (for metrics).
func (s *Store) FreeBytes() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free()
}

// ReadOnly reports whether the store is open read-only for lack of space.
func (s *Store) ReadOnly() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readOnly
}

// fail records that pebble failed a write: the store takes no more writes
// (pebble's log writer keeps the error, and its next rotation would
// panic). It returns the store's failure (the first recorded).
func (s *Store) fail(err error) error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if s.failed == nil {
		s.failed = fmt.Errorf("%w: the data directory %s: %w; the write may or may not be stored, and writes are refused until the server is restarted (free space first if the disk is full)",
			store.ErrWriteFailed, s.dir, err)
	}
	return s.failed
}

// failure is the store's failure, nil while it takes writes.
func (s *Store) failure() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

// applyLocked hands b to pebble. Pebble panics on some write errors (its
// Logger.Fatalf, or a plain panic when a new log cannot be made): the
// panic is taken as the store's failure, never the process's.
func (s *Store) applyLocked(b *pebble.Batch, sync bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.panicked = true
			err = s.fail(fmt.Errorf("pebble: %v", r))
		}
	}()
	if sync {
		return s.db.ApplyNoSyncWait(b, pebble.Sync)
	}
	return b.Commit(pebble.NoSync)
}

// closed is the error of a store without its pebble: its failure, or
// closed.
func (s *Store) closed() error {
	if err := s.failure(); err != nil {
		return err
	}
	return store.ErrClosed
}
