package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sextant-mesh/sextant/internal/store"
)

func load(t *testing.T, s *Store) map[string]store.Record {
	t.Helper()
	got := map[string]store.Record{}
	if err := s.Load(func(r store.Record) error {
		got[r.ID] = store.Record{ID: r.ID, Revision: r.Revision, Value: append([]byte(nil), r.Value...)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestCommitRevisionsAndReopen: each txn of a commit gets the next revision,
// an empty txn (a health change) takes one too, and everything survives a
// reopen, the revision counter included.
func TestCommitRevisionsAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Commit([]store.Txn{
		{Ops: []store.Op{{ID: "a", Value: []byte("A1")}, {ID: "b", Value: []byte("B1")}}},
		{Ops: []store.Op{{ID: "c", Value: []byte("C1")}}},
		{}, // a health change: no record, still a revision
	}, true)
	if err != nil || first != 1 || s.Revision() != 3 {
		t.Fatalf("first commit: first=%d revision=%d err=%v, want 1, 3", first, s.Revision(), err)
	}
	first, err = s.Commit([]store.Txn{{Ops: []store.Op{{ID: "a", Value: []byte("A2")}, {ID: "b"}}}}, false)
	if err != nil || first != 4 {
		t.Fatalf("second commit: first=%d err=%v", first, err)
	}
	want := map[string]store.Record{
		"a": {ID: "a", Revision: 4, Value: []byte("A2")},
		"c": {ID: "c", Revision: 2, Value: []byte("C1")},
	}
	if got := load(t, s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Load = %v, want %v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit([]store.Txn{{}}, true); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("commit after close: %v, want ErrClosed", err)
	}
	if err := s.Load(func(store.Record) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("load after close: %v, want ErrClosed", err)
	}

	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Revision() != 4 {
		t.Fatalf("revision after reopen %d, want 4", s.Revision())
	}
	if got := load(t, s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after reopen Load = %v, want %v", got, want)
	}
	if first, err := s.Commit([]store.Txn{{}}, true); err != nil || first != 5 {
		t.Fatalf("revisions must continue after reopen: first=%d err=%v", first, err)
	}
}

func TestLoadStopsOnError(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{{ID: "a", Value: []byte("x")}, {ID: "b", Value: []byte("y")}}}}, true); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	n := 0
	err = s.Load(func(store.Record) error { n++; return stop })
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
