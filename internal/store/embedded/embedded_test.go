package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/sextant-mesh/sextant/internal/store"
)

func load(t *testing.T, s *Store, kinds ...store.Kind) (map[string]store.Record, int64) {
	t.Helper()
	if len(kinds) == 0 {
		kinds = []store.Kind{store.Instances}
	}
	got := map[string]store.Record{}
	rev, err := s.Load(kinds, func(r store.Record) error {
		got[r.Kind.String()+"/"+r.Key] = store.Record{Kind: r.Kind, Key: r.Key, Revision: r.Revision, Value: append([]byte(nil), r.Value...)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, rev
}

// reopen opens the store in dir again; it is closed when the test ends.
func reopen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("reopen %s: %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(k store.Kind, key, v string) store.Op { return store.Op{Kind: k, Key: key, Value: []byte(v)} }
func del(k store.Kind, key string) store.Op    { return store.Op{Kind: k, Key: key} }

func revs(res []store.Result) []int64 {
	out := make([]int64, len(res))
	for i, r := range res {
		out[i] = r.Revision
	}
	return out
}

// TestCommitRevisionsAndReopen: each txn of a commit gets the next revision
// (an empty one takes none: health is a record now), kinds are separate key
// spaces, and everything survives a reopen, the revision counter included.
func TestCommitRevisionsAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Commit([]store.Txn{
		{Ops: []store.Op{put(store.Instances, "a", "A1"), put(store.Instances, "b", "B1")}},
		{Ops: []store.Op{put(store.Instances, "c", "C1")}},
		{}, // nothing to write: no revision
		{Ops: []store.Op{put(store.Config, "a", "config A")}},
	}, true)
	if err != nil || fmt.Sprint(revs(res)) != "[1 2 0 3]" || s.Revision() != 3 {
		t.Fatalf("first commit: revisions %v, store at %d, err %v; want [1 2 0 3] at 3", revs(res), s.Revision(), err)
	}
	res, err = s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, "a", "A2"), del(store.Instances, "b")}}}, false)
	if err != nil || res[0].Revision != 4 {
		t.Fatalf("second commit: %v err=%v", res, err)
	}
	want := map[string]store.Record{
		"instances/a": {Kind: store.Instances, Key: "a", Revision: 4, Value: []byte("A2")},
		"instances/c": {Kind: store.Instances, Key: "c", Revision: 2, Value: []byte("C1")},
		"config/a":    {Kind: store.Config, Key: "a", Revision: 3, Value: []byte("config A")},
	}
	if got, rev := load(t, s, store.Instances, store.Config); fmt.Sprint(got) != fmt.Sprint(want) || rev != 4 {
		t.Fatalf("Load = %v at %d, want %v at 4", got, rev, want)
	}
	if got, _ := load(t, s, store.Config); len(got) != 1 {
		t.Fatalf("Load(config) = %v, want the config record only", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, "x", "x")}}}, true); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("commit after close: %v, want ErrClosed", err)
	}
	if _, err := s.Load([]store.Kind{store.Instances}, func(store.Record) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("load after close: %v, want ErrClosed", err)
	}

	s = reopen(t, dir)
	if s.Revision() != 4 {
		t.Fatalf("revision after reopen %d, want 4", s.Revision())
	}
	if got, _ := load(t, s, store.Instances, store.Config); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after reopen Load = %v, want %v", got, want)
	}
	if res, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Nodes, "n1", "x")}}}, true); err != nil || res[0].Revision != 5 {
		t.Fatalf("revisions must continue after reopen: %v err=%v", res, err)
	}
}

// TestFollow: a feed yields every commit after its position, in order,
// with the writer's objects; waits for the next; ends on Close; and a
// position older than what is held is ErrCompacted.
func TestFollow(t *testing.T) {
	s, err := OpenWith(t.TempDir(), Options{FeedOps: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, "a", "1")}}}, true); err != nil {
		t.Fatal(err)
	}
	f, err := s.Follow(1)
	if err != nil {
		t.Fatal(err)
	}
	obj := &struct{ n int }{7}
	op := put(store.Instances, "b", "2")
	op.Object = obj
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{op}}, {Ops: []store.Op{del(store.Instances, "a")}}}, true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := f.Next(ctx)
	if err != nil || len(got) != 2 || got[0].Revision != 2 || got[1].Revision != 3 || got[0].Ops[0].Object != obj || got[1].Ops[0].Value != nil {
		t.Fatalf("Next = %+v, %v", got, err)
	}
	// Next waits for the next commit.
	done := make(chan []store.Change)
	go func() {
		c, _ := f.Next(ctx)
		done <- c
	}()
	select {
	case c := <-done:
		t.Fatalf("Next returned %v before a commit", c)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Nodes, "n", "x")}}}, false); err != nil {
		t.Fatal(err)
	}
	if c := <-done; len(c) != 1 || c[0].Revision != 4 || c[0].Ops[0].Kind != store.Nodes {
		t.Fatalf("after the commit Next = %+v", c)
	}
	// What every open feed has read is not kept: following from before it
	// is compacted; more than FeedOps unread ops are not kept either.
	if _, err := s.Follow(1); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Follow(1) after it was read: %v, want ErrCompacted", err)
	}
	var big []store.Txn
	for i := range 6 {
		big = append(big, store.Txn{Ops: []store.Op{put(store.Instances, fmt.Sprint(i), "x")}})
	}
	if _, err := s.Commit(big, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Next(ctx); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Next after falling %d ops behind a bound of 4: %v, want ErrCompacted", len(big), err)
	}
	f.Close()
	if _, err := s.Follow(s.Revision()); err != nil {
		t.Fatalf("Follow from the current revision: %v", err)
	}
	if _, err := s.Follow(s.Revision() + 1); err == nil {
		t.Fatal("Follow from a revision the store has not reached succeeded")
	}
}

// TestFollowEndsOnClose: a waiting Next answers ErrClosed when the store
// closes.
func TestFollowEndsOnClose(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Follow(0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := f.Next(context.Background())
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	s.Close()
	if err := <-done; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
}

func TestLoadStopsOnError(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, "a", "x"), put(store.Instances, "b", "y")}}}, true); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	n := 0
	_, err = s.Load([]store.Kind{store.Instances}, func(store.Record) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Load returned %v after %d records, want the callback's error after 1", err, n)
	}
}

func TestOpenErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(file); err == nil {
		t.Fatal("Open on a regular file succeeded")
	}
}

// TestCloseFlushes: a closed store holds its records in tables, so that
// the next Open need not replay the write-ahead log into a memtable and
// flush it (pebble opened read-only finds them in tables); they load back
// whole.
func TestCloseFlushes(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, fmt.Sprint(i), "v")}}}, i == 99); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: quietLogger{}, Levels: levels()})
	if err != nil {
		t.Fatal(err)
	}
	m := db.Metrics()
	tables := int64(0)
	for _, l := range m.Levels {
		tables += l.NumFiles
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if tables == 0 {
		t.Fatalf("no table after Close: the records are only in the write-ahead log")
	}
	s = reopen(t, dir)
	if got, rev := load(t, s); len(got) != 100 || rev != 100 {
		t.Fatalf("reopened: %d records at revision %d, want 100 at 100", len(got), rev)
	}
}

// TestCloseWithoutDirectory: a store whose directory was removed under it
// closes with an error or none, and the process stays up (pebble's flush
// would find its log file missing, which it takes as fatal).
func TestCloseWithoutDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, "a", "A")}}}, true); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	err = s.Close()
	t.Logf("close after the directory's removal: %v", err)
}
