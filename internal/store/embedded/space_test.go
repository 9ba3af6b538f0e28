package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/disktest"
	"github.com/sextant-mesh/sextant/internal/store"
)

func putBig(s *Store, key string) ([]store.Result, error) {
	return s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, key, strings.Repeat("v", 256<<10))}}}, true)
}

// TestDiskFull: on a nearly full file system writes are refused with a
// SpaceError naming the directory, nothing written, reads go on; once
// space is freed they resume by themselves. Opened again on a nearly full
// disk the store opens read-only with everything, and turns writable at
// the first write that finds room.
func TestDiskFull(t *testing.T) {
	const reserve = 4 << 20
	mnt := disktest.Tmpfs(t, 32<<20, false)
	dir := filepath.Join(mnt, "data")
	s, err := OpenWith(dir, Options{Reserve: reserve})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() }) // before the unmount
	filler := disktest.Fill(t, mnt, 12<<20)
	var (
		acked int
		space *store.SpaceError
	)
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("100 writes of 256 KiB into 8 MiB were all accepted")
		}
		_, err = putBig(s, fmt.Sprintf("k%03d", i))
		if errors.As(err, &space) {
			break
		}
		if err != nil {
			t.Fatalf("write %d: %v, want a SpaceError", i, err)
		}
		acked++
	}
	if !errors.Is(err, store.ErrNoSpace) || space.Dir != dir || !strings.Contains(space.Error(), dir) || space.Free >= reserve {
		t.Fatalf("refusal %v (%+v), want ErrNoSpace naming %s below %d", space, space, dir, reserve)
	}
	t.Logf("after %d writes: %v", acked, space)
	// Refused again, and reads go on.
	if _, err := putBig(s, "again"); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("write on a full disk: %v", err)
	}
	// A small commit without fsync (a health change) still goes into
	// half the reserve.
	if res, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, "k000", "critical")}}}, false); err != nil || res[0].Revision != int64(acked+1) {
		t.Fatalf("health change on a nearly full disk: %v %v", res, err)
	}
	acked++
	disktest.Fill(t, mnt, reserve/4) // a second filler: below half the reserve
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, "k000", "passing")}}}, false); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("health change below half the reserve: %v", err)
	}
	if got, rev := load(t, s); len(got) != acked-1 || rev != int64(acked) {
		t.Fatalf("read %d records at %d, want the %d acknowledged", len(got), rev, acked)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filler + "2"); err != nil {
		t.Fatal(err)
	}
	if res, err := putBig(s, "resumed"); err != nil || res[0].Revision != int64(acked+1) {
		t.Fatalf("write once space is freed: %v %v", res, err)
	}
	acked++
	records := acked - 1 // k000 written twice
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Nearly full at open: read-only, everything there.
	filler = disktest.Fill(t, mnt, reserve/2)
	s, err = OpenWith(dir, Options{Reserve: reserve})
	if err != nil {
		t.Fatalf("open on a nearly full disk: %v", err)
	}
	if !s.ReadOnly() {
		t.Fatal("opened on a nearly full disk, and not read-only")
	}
	if got, rev := load(t, s); len(got) != records || rev != int64(acked) {
		t.Fatalf("read-only: %d records at %d, want %d at %d", len(got), rev, records, acked)
	}
	if _, err := putBig(s, "ro"); !errors.As(err, &space) || !space.ReadOnly {
		t.Fatalf("write to the read-only store: %v, want a SpaceError", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if res, err := putBig(s, "writable"); err != nil || res[0].Revision != int64(acked+1) {
		t.Fatalf("write once space is freed: %v %v", res, err)
	}
	if s.ReadOnly() {
		t.Fatal("still read-only after a write")
	}
}

// TestDiskFullWithoutReserve: with the check off, pebble itself meets the
// full disk. The store fails its writes (ErrWriteFailed, naming the
// directory) and refuses the next ones; it does not panic, and reads go on.
func TestDiskFullWithoutReserve(t *testing.T) {
	mnt := disktest.Tmpfs(t, 16<<20, false)
	dir := filepath.Join(mnt, "data")
	s, err := OpenWith(dir, Options{Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	filler := disktest.Fill(t, mnt, 4<<20)
	acked := 0
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("100 writes of 256 KiB into 4 MiB were all accepted")
		}
		_, err = putBig(s, fmt.Sprintf("k%03d", i))
		if err != nil {
			break
		}
		acked++
	}
	if !errors.Is(err, store.ErrWriteFailed) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("write on a full disk: %v, want ErrWriteFailed naming %s", err, dir)
	}
	t.Logf("after %d writes: %v", acked, err)
	if _, err := putBig(s, "next"); !errors.Is(err, store.ErrWriteFailed) {
		t.Fatalf("write after the failure: %v", err)
	}
	if err := s.Close(); err == nil {
		t.Fatal("close of a store that failed a write reported nothing")
	}
	// Restarted once space is freed, with every acknowledged write.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s, err = OpenWith(dir, Options{Reserve: 1 << 20})
	if err != nil {
		t.Fatalf("reopen once space is freed: %v", err)
	}
	if got, rev := load(t, s); len(got) < acked || rev < int64(acked) {
		t.Fatalf("reopened: %d records at %d, want the %d acknowledged", len(got), rev, acked)
	}
	if _, err := putBig(s, "after"); err != nil {
		t.Fatalf("write after the restart: %v", err)
	}
}

// BenchmarkFree: the free-space check each commit pays (fstatfs on the
// directory held open).
func BenchmarkFree(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if _, err := s.free(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDiskFullUnsynced: commits without fsync (health changes) learn of no
// failed write: pebble, not the store, meets the full disk first, and
// panics in its commit (a new log it cannot start). The panic is the
// store's failure (ErrWriteFailed), not the process's; pebble, whose locks
// the panic may hold, is then left open, so the tmpfs is detached lazily.
func TestDiskFullUnsynced(t *testing.T) {
	mnt := disktest.Tmpfs(t, 16<<20, true)
	dir := filepath.Join(mnt, "data")
	s, err := OpenWith(dir, Options{Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	disktest.Fill(t, mnt, 4<<20)
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("200 unsynced writes of 256 KiB into 4 MiB were all accepted")
		}
		_, err = s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, fmt.Sprintf("k%03d", i), strings.Repeat("v", 256<<10))}}}, false)
		if err != nil {
			break
		}
	}
	if !errors.Is(err, store.ErrWriteFailed) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("unsynced write on a full disk: %v, want ErrWriteFailed naming %s", err, dir)
	}
	t.Logf("%v", err)
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, "next", "x")}}}, false); !errors.Is(err, store.ErrWriteFailed) {
		t.Fatalf("write after the failure: %v", err)
	}
	if _, err := s.Load([]store.Kind{store.Instances}, func(store.Record) error { return nil }); !errors.Is(err, store.ErrWriteFailed) {
		t.Fatalf("load after a panic in pebble: %v, want the failure", err)
	}
	if err := s.Close(); !errors.Is(err, store.ErrWriteFailed) {
		t.Fatalf("close after a panic in pebble: %v, want the failure", err)
	}
}
