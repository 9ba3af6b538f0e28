package embedded

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

// TestCommitAsync: commits reach followers only through durable, in
// commit order whichever durable is called first (a commit without fsync
// waits for the earlier ones' fsync); Load waits for commits still
// syncing, so that following from its revision works; Close syncs the
// commits nobody waited for.
func TestCommitAsync(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Follow(0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	commit := func(key string, sync bool) func() error {
		t.Helper()
		res, durable, err := s.CommitAsync([]store.Txn{{Ops: []store.Op{put(store.Instances, key, key)}}}, sync)
		if err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
		return durable
	}
	next := func(wait time.Duration) []int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		changes, err := f.Next(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, c := range changes {
			got = append(got, c.Revision)
		}
		return got
	}
	d1, d2, d3 := commit("a", true), commit("b", false), commit("c", true)
	if got := next(50 * time.Millisecond); got != nil {
		t.Fatalf("followers got %v before any commit was waited for", got)
	}
	if err := d2(); err != nil { // without fsync, after a with: both, in order
		t.Fatal(err)
	}
	if got := next(time.Second); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("after the second commit's durable: %v, want [1 2]", got)
	}
	if err := d3(); err != nil {
		t.Fatal(err)
	}
	if err := d1(); err != nil {
		t.Fatal(err)
	}
	if got := next(time.Second); len(got) != 1 || got[0] != 3 {
		t.Fatalf("after the third: %v, want [3]", got)
	}
	commit("d", true) // never waited for by its writer
	if _, rev := load(t, s); rev != 4 {
		t.Fatalf("Load at revision %d, want 4", rev)
	}
	if f2, err := s.Follow(4); err != nil {
		t.Fatalf("follow from Load's revision: %v", err)
	} else {
		f2.Close()
	}
	commit("e", true)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, dir)
	if got, rev := load(t, s); len(got) != 5 || rev != 5 {
		t.Fatalf("reopened: %d records at revision %d, want 5 at 5", len(got), rev)
	}
}
