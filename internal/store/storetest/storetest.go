// Package storetest is the contract every store backend keeps (revisions,
// conditions, load and the change stream), as tests that each backend's
// own test file runs against a real instance of it: the embedded store on
// a temporary directory, the MySQL store on a fresh database. It owns no
// backend.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

// Backend is a store under test.
type Backend interface {
	Commit(txns []store.Txn, sync bool) ([]store.Result, error)
	Load(kinds []store.Kind, fn func(store.Record) error) (int64, error)
	Follow(since int64) (store.Feed, error)
	Close() error
}

// Harness opens backends for the contract.
type Harness struct {
	// Open returns a new, empty store, closed when t ends.
	Open func(t *testing.T) Backend
	// Reopen closes b and opens its storage again (nil: not tested).
	Reopen func(t *testing.T, b Backend) Backend
	// Peer opens a second store over b's storage, as a second server of a
	// cluster would (nil: the backend has one process per storage).
	Peer func(t *testing.T, b Backend) Backend
}

// Run runs the contract.
func Run(t *testing.T, h Harness) {
	t.Run("Revisions", func(t *testing.T) { testRevisions(t, h) })
	t.Run("Conditions", func(t *testing.T) { testConditions(t, h) })
	t.Run("Follow", func(t *testing.T) { testFollow(t, h) })
	t.Run("ConcurrentFollowers", func(t *testing.T) { testConcurrent(t, h) })
	t.Run("LargeTransactions", func(t *testing.T) { testLarge(t, h) })
	t.Run("UnknownKind", func(t *testing.T) { testUnknownKind(t, h) })
}

func put(k store.Kind, key, v string) store.Op { return store.Op{Kind: k, Key: key, Value: []byte(v)} }
func del(k store.Kind, key string) store.Op    { return store.Op{Kind: k, Key: key} }
func ifRev(op store.Op, rev int64) store.Op {
	op.Check, op.IfRevision = true, rev
	return op
}

func revs(res []store.Result) []int64 {
	out := make([]int64, len(res))
	for i, r := range res {
		out[i] = r.Revision
	}
	return out
}

// Load returns the records of kinds keyed "kind/key" and the revision.
func Load(t testing.TB, b Backend, kinds ...store.Kind) (map[string]store.Record, int64) {
	t.Helper()
	got := map[string]store.Record{}
	rev, err := b.Load(kinds, func(r store.Record) error {
		got[r.Kind.String()+"/"+r.Key] = store.Record{Kind: r.Kind, Key: r.Key, Revision: r.Revision, Value: append([]byte(nil), r.Value...)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, rev
}

// nonInstance kinds hold opaque values; instances must hold a valid
// instance encoding in some backends, so the contract's plain values go to
// the other kinds.
var plain = []store.Kind{store.Config, store.Nodes, store.Placements, store.Tokens, store.Policies, store.System}

func testRevisions(t *testing.T, h Harness) {
	s := h.Open(t)
	res, err := s.Commit([]store.Txn{
		{Ops: []store.Op{put(store.Config, "a", "A1"), put(store.Config, "b", "B1")}},
		{Ops: []store.Op{put(store.Config, "c", "C1")}},
		{}, // nothing to write: no revision
		{Ops: []store.Op{put(store.Nodes, "a", "node A")}},
	}, true)
	if err != nil || fmt.Sprint(revs(res)) != "[1 2 0 3]" {
		t.Fatalf("first commit: revisions %v, err %v; want [1 2 0 3]", revs(res), err)
	}
	res, err = s.Commit([]store.Txn{{Ops: []store.Op{put(store.Config, "a", "A2"), del(store.Config, "b")}}}, false)
	if err != nil || res[0].Revision != 4 {
		t.Fatalf("second commit: %v err=%v", res, err)
	}
	want := map[string]store.Record{
		"config/a": {Kind: store.Config, Key: "a", Revision: 4, Value: []byte("A2")},
		"config/c": {Kind: store.Config, Key: "c", Revision: 2, Value: []byte("C1")},
		"nodes/a":  {Kind: store.Nodes, Key: "a", Revision: 3, Value: []byte("node A")},
	}
	if got, rev := Load(t, s, store.Config, store.Nodes); fmt.Sprint(got) != fmt.Sprint(want) || rev != 4 {
		t.Fatalf("Load = %v at %d, want %v at 4", got, rev, want)
	}
	if got, _ := Load(t, s, store.Nodes); len(got) != 1 {
		t.Fatalf("Load(nodes) = %v, want the node only", got)
	}
	// Key order within a kind is bytewise.
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Tokens, "b", "x"), put(store.Tokens, "B", "x"), put(store.Tokens, "a", "x"), put(store.Tokens, "ä", "x")}}}, true); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if _, err := s.Load([]store.Kind{store.Tokens}, func(r store.Record) error { keys = append(keys, r.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[B a b ä]" {
		t.Fatalf("Load order %q, want bytewise [B a b ä]", keys)
	}
	if h.Reopen == nil {
		return
	}
	s = h.Reopen(t, s)
	if got, rev := Load(t, s, store.Config, store.Nodes); fmt.Sprint(got) != fmt.Sprint(want) || rev != 5 {
		t.Fatalf("after reopen Load = %v at %d, want %v at 5", got, rev, want)
	}
	if res, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Nodes, "n1", "x")}}}, true); err != nil || res[0].Revision != 6 {
		t.Fatalf("revisions must continue after reopen: %v err=%v", res, err)
	}
}

func testConditions(t *testing.T, h Harness) {
	s := h.Open(t)
	res, err := s.Commit([]store.Txn{{Ops: []store.Op{ifRev(put(store.Config, "vs", "v1"), 0)}}}, true)
	if err != nil || res[0].Err != nil || res[0].Revision != 1 {
		t.Fatalf("create: %v %v", res, err)
	}
	res, err = s.Commit([]store.Txn{
		{Ops: []store.Op{ifRev(put(store.Config, "vs", "again"), 0)}},                               // exists: conflict
		{Ops: []store.Op{put(store.Config, "other", "o"), ifRev(put(store.Config, "vs", "v2"), 1)}}, // replace if unchanged
		{Ops: []store.Op{ifRev(put(store.Config, "vs", "v3"), 1)}},                                  // stale after the txn before
		{Ops: []store.Op{ifRev(put(store.Config, "vs", "v3"), 2)}},                                  // sees the batch's write
		{Ops: []store.Op{ifRev(del(store.Config, "gone"), 5)}},                                      // absent
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(revs(res)) != "[0 2 0 3 0]" {
		t.Fatalf("revisions %v, want [0 2 0 3 0]", revs(res))
	}
	var ce *store.ConflictError
	for i, want := range map[int]string{
		0: `store: conflict: config "vs" exists (revision 1)`,
		2: `store: conflict: config "vs" is at revision 2, not 1`,
		4: `store: conflict: config "gone" does not exist`,
	} {
		if !errors.Is(res[i].Err, store.ErrConflict) || !errors.As(res[i].Err, &ce) || res[i].Err.Error() != want {
			t.Errorf("txn %d: %v, want %q", i, res[i].Err, want)
		}
	}
	got, rev := Load(t, s, store.Config)
	if rev != 3 || string(got["config/vs"].Value) != "v3" || got["config/vs"].Revision != 3 || string(got["config/other"].Value) != "o" {
		t.Fatalf("after conditional commit: %v at %d", got, rev)
	}
	// A commit whose every txn fails writes nothing and takes no revision.
	res, err = s.Commit([]store.Txn{{Ops: []store.Op{ifRev(put(store.Config, "vs", "x"), 1)}}}, true)
	if err != nil || res[0].Err == nil || res[0].Revision != 0 {
		t.Fatalf("failing commit: %v %v", res, err)
	}
	if _, rev := Load(t, s, store.Config); rev != 3 {
		t.Fatalf("a failed commit moved the revision to %d", rev)
	}
	// Delete then re-create in one commit: the check sees the delete.
	res, err = s.Commit([]store.Txn{
		{Ops: []store.Op{ifRev(del(store.Config, "vs"), 3)}},
		{Ops: []store.Op{ifRev(put(store.Config, "vs", "v4"), 0)}},
	}, true)
	if err != nil || fmt.Sprint(revs(res)) != "[4 5]" {
		t.Fatalf("delete and re-create: %v %v", res, err)
	}
	if h.Peer != nil {
		// Checks hold against every writer, not only this process.
		p := h.Peer(t, s)
		res, err := p.Commit([]store.Txn{{Ops: []store.Op{ifRev(put(store.Config, "vs", "peer"), 5)}}}, true)
		if err != nil || res[0].Revision != 6 {
			t.Fatalf("peer commit: %v %v", res, err)
		}
		res, err = s.Commit([]store.Txn{{Ops: []store.Op{ifRev(put(store.Config, "vs", "stale"), 5)}}}, true)
		if err != nil || !errors.Is(res[0].Err, store.ErrConflict) {
			t.Fatalf("a check stale after a peer's commit: %v %v, want a conflict", res, err)
		}
	}
}

func next(t *testing.T, f store.Feed) []store.Change {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := f.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return c
}

func testFollow(t *testing.T, h Harness) {
	s := h.Open(t)
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Config, "a", "1")}}}, true); err != nil {
		t.Fatal(err)
	}
	f, err := s.Follow(1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	obj := &struct{ n int }{7}
	op := put(store.Config, "b", "2")
	op.Object = obj
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{op}}, {Ops: []store.Op{del(store.Config, "a")}}}, true); err != nil {
		t.Fatal(err)
	}
	got := next(t, f)
	if len(got) < 1 || got[0].Revision != 2 || got[0].Ops[0].Object != obj || string(got[0].Ops[0].Value) != "2" {
		t.Fatalf("Next = %+v, want revision 2 with the writer's object", got)
	}
	if got[0].Time == 0 {
		t.Fatal("a change without its commit time")
	}
	if len(got) == 1 {
		got = append(got, next(t, f)...)
	}
	if len(got) != 2 || got[1].Revision != 3 || got[1].Ops[0].Value != nil || got[1].Ops[0].Key != "a" {
		t.Fatalf("Next = %+v, want revisions 2 and 3 (a delete)", got)
	}
	// Next waits for the next commit, and ends with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan []store.Change)
	go func() {
		c, _ := f.Next(ctx)
		done <- c
	}()
	select {
	case c := <-done:
		t.Fatalf("Next returned %v before a commit", c)
	case <-time.After(30 * time.Millisecond):
	}
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Nodes, "n", "x")}}}, false); err != nil {
		t.Fatal(err)
	}
	if c := <-done; len(c) != 1 || c[0].Revision != 4 || c[0].Ops[0].Kind != store.Nodes {
		t.Fatalf("after the commit Next = %+v", c)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if _, err := f.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next past its context: %v, want DeadlineExceeded", err)
	}
	if h.Peer == nil {
		return
	}
	// A peer's commits reach this process's follower, without objects.
	p := h.Peer(t, s)
	if _, err := p.Commit([]store.Txn{{Ops: []store.Op{put(store.Config, "p", "peer")}}}, true); err != nil {
		t.Fatal(err)
	}
	c := next(t, f)
	if len(c) != 1 || c[0].Revision != 5 || string(c[0].Ops[0].Value) != "peer" || c[0].Ops[0].Object != nil {
		t.Fatalf("peer's commit: %+v", c)
	}
}

// testConcurrent: writers on every process commit at once; a follower on
// each reproduces the stored state exactly, revision for revision, with no
// revision missed or repeated.
func testConcurrent(t *testing.T, h Harness) {
	s := h.Open(t)
	procs := []Backend{s}
	if h.Peer != nil {
		procs = append(procs, h.Peer(t, s), h.Peer(t, s))
	}
	const writers, commits = 3, 40
	type result struct {
		state map[string]store.Record
		last  int64
		err   error
	}
	total := int64(len(procs) * writers * commits)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results := make([]chan result, len(procs))
	for i, p := range procs {
		f, err := p.Follow(0)
		if err != nil {
			t.Fatal(err)
		}
		results[i] = make(chan result, 1)
		go func() {
			defer f.Close()
			state := map[string]store.Record{}
			var last int64
			for last < total {
				cs, err := f.Next(ctx)
				if err != nil {
					results[i] <- result{err: err}
					return
				}
				for _, c := range cs {
					if c.Revision != last+1 {
						results[i] <- result{err: fmt.Errorf("revision %d after %d", c.Revision, last)}
						return
					}
					last = c.Revision
					for _, op := range c.Ops {
						k := op.Kind.String() + "/" + op.Key
						if op.Value == nil {
							delete(state, k)
						} else {
							state[k] = store.Record{Kind: op.Kind, Key: op.Key, Revision: c.Revision, Value: append([]byte(nil), op.Value...)}
						}
					}
				}
			}
			results[i] <- result{state: state, last: last}
		}()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex // Commit is called by one goroutine at a time per process
	locks := make([]sync.Mutex, len(procs))
	for pi, p := range procs {
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range commits {
					kind := plain[(w+i)%len(plain)]
					key := fmt.Sprintf("k%d", (pi*7+w*3+i)%17)
					op := put(kind, key, fmt.Sprintf("p%d w%d i%d", pi, w, i))
					if i%5 == 4 {
						op = del(kind, key)
					}
					txns := []store.Txn{{Ops: []store.Op{op, put(store.System, fmt.Sprintf("p%dw%d", pi, w), fmt.Sprint(i))}}}
					locks[pi].Lock()
					res, err := p.Commit(txns, i%2 == 0)
					locks[pi].Unlock()
					if err != nil || res[0].Revision == 0 {
						mu.Lock()
						t.Errorf("commit: %v %v", res, err)
						mu.Unlock()
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	want, rev := Load(t, s, store.Kinds()...)
	if rev != total {
		t.Fatalf("store at revision %d after %d commits", rev, total)
	}
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("follower %d: %v", i, r.err)
		}
		if !maps.EqualFunc(r.state, want, func(a, b store.Record) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
			t.Fatalf("follower %d reproduced %d records, the store holds %d: %v\nvs %v", i, len(r.state), len(want), r.state, want)
		}
	}
}

// testLarge: big transactions and big commits come through whole.
func testLarge(t *testing.T, h Harness) {
	s := h.Open(t)
	follower := s
	if h.Peer != nil {
		follower = h.Peer(t, s) // reads the stored stream, not this process's memory
	}
	f, err := follower.Follow(0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	big := store.Txn{}
	for i := range 12000 {
		big.Ops = append(big.Ops, put(store.Nodes, fmt.Sprintf("n%05d", i), fmt.Sprintf("value %d", i)))
	}
	var many []store.Txn
	for i := range 9000 {
		many = append(many, store.Txn{Ops: []store.Op{put(store.Placements, fmt.Sprintf("p%05d", i), "x")}})
	}
	for _, c := range [][]store.Txn{{big}, many, {big}} {
		if _, err := s.Commit(c, true); err != nil {
			t.Fatal(err)
		}
	}
	var last int64
	ops := 0
	for last < 9002 {
		for _, c := range next(t, f) {
			if c.Revision != last+1 {
				t.Fatalf("revision %d after %d", c.Revision, last)
			}
			last = c.Revision
			ops += len(c.Ops)
			want := 1
			if c.Revision == 1 || c.Revision == 9002 {
				want = 12000
			}
			if len(c.Ops) != want {
				t.Fatalf("revision %d came with %d ops, want %d", c.Revision, len(c.Ops), want)
			}
		}
	}
	got, rev := Load(t, s, store.Nodes, store.Placements)
	if rev != 9002 || len(got) != 21000 || got["nodes/n00042"].Revision != 9002 {
		t.Fatalf("after large commits: %d records at %d", len(got), rev)
	}
}

func testUnknownKind(t *testing.T, h Harness) {
	s := h.Open(t)
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Kind('?'), "a", "x")}}}, true); err == nil {
		t.Fatal("a commit on an unknown kind succeeded")
	}
	if _, rev := Load(t, s, store.Config); rev != 0 {
		t.Fatalf("a failed commit moved the revision to %d", rev)
	}
}
