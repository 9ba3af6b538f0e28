package commit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// heldFeed is a store whose follower is held: what others commit to it
// stays out of the engine's catalog.
type heldFeed struct{ *embedded.Store }

func (h heldFeed) Follow(since int64) (store.Feed, error) {
	f, err := h.Store.Follow(since)
	return held{f}, err
}

type held struct{ store.Feed }

func (held) Next(ctx context.Context) ([]store.Change, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// deleteSeen deletes a System record on condition that it is still the
// version this server's catalog saw, as every delete of a shared store is
// (the instance kind's deregister); "not found" if the batch or the
// catalog has it gone.
type deleteSeen struct {
	key      string
	notFound bool
}

func (w *deleteSeen) Plan(tx *Tx) error {
	v, rev := tx.Get(store.System, w.key)
	if v == nil {
		w.notFound = true
		tx.Answer(tx.Revision())
		return nil
	}
	tx.DeleteIf(store.System, w.key, rev)
	return nil
}

// TestSharedCarriesWhatRestsOnAFailedCondition: over a shared store a
// write of a batch may fail its condition at commit (another server
// changed the record), so a later write of the same batch must not be
// decided on what the earlier one would have done: two deletes of a record
// another server has just replaced, in one batch. The first conflicts; the
// second, which found the record deleted by the first, would have been
// answered "not found" while it is there. It is carried to the next batch
// instead, unanswered, to be planned on what this batch committed.
func TestSharedCarriesWhatRestsOnAFailedCondition(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	put := func(v string) {
		t.Helper()
		if _, err := st.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.System, Key: "x", Value: []byte(v)}}}}, true); err != nil {
			t.Fatal(err)
		}
	}
	put("v1")
	e, err := Open(heldFeed{st}, Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if v, rev, ok := e.Catalog().Table(store.System).Record("x"); !ok || rev != 1 || string(v.(*catalog.Blob).Value) != "v1" {
		t.Fatalf("loaded %v at %d", v, rev)
	}
	put("v2") // another server's replacement, which the catalog does not see
	first := &request{w: &deleteSeen{key: "x"}, done: make(chan struct{})}
	second := &request{w: &deleteSeen{key: "x"}, done: make(chan struct{})}
	// The committer goroutine is idle (nothing queued): this goroutine
	// plays it for one batch.
	carried := e.commit(ctx, []*request{first, second})
	if ConflictRevision(first.err) == 0 {
		t.Fatalf("first delete of a replaced record: %v, want a conflict", first.err)
	}
	select {
	case <-second.done:
		t.Fatalf("second delete answered (not found %v, err %v) on the first's delete, which failed", second.w.(*deleteSeen).notFound, second.err)
	default:
	}
	if len(carried) != 1 || carried[0] != second {
		t.Fatalf("carried %d requests, want the second delete", len(carried))
	}
}

// gatedShared is a store shared with another server (it answers Head)
// whose follower waits until open is closed.
type gatedShared struct {
	*embedded.Store
	open chan struct{}
	head atomic.Int64
}

func (g *gatedShared) Follow(since int64) (store.Feed, error) {
	f, err := g.Store.Follow(since)
	return gatedFeed{f, g.open}, err
}

func (g *gatedShared) Head(context.Context, int64) (int64, int64, error) {
	return g.head.Load(), 0, nil
}

type gatedFeed struct {
	store.Feed
	open chan struct{}
}

func (f gatedFeed) Next(ctx context.Context) ([]store.Change, error) {
	select {
	case <-f.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return f.Feed.Next(ctx)
}

// putIfAbsent writes a System record unless the catalog has it, then
// answers it unchanged, as an identical re-register does. Its first plan
// lets the follower apply what another server committed, and waits for it:
// the race of a follower moving between the plans and the catch-up.
type putIfAbsent struct {
	key    string
	e      *Engine
	g      *gatedShared
	plans  int
	target int64
}

func (w *putIfAbsent) Plan(tx *Tx) error {
	w.plans++
	v, rev := tx.Get(store.System, w.key)
	if w.plans == 1 {
		close(w.g.open)
		for deadline := time.Now().Add(10 * time.Second); w.e.Catalog().Revision() < w.target; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("the follower did not apply the other server's delete")
			}
		}
	}
	if v != nil {
		tx.Answer(rev)
		return nil
	}
	tx.Put(store.System, w.key, tx.Encode(func(b []byte) []byte { return append(b, "v2"...) }), &catalog.Blob{Key: w.key, Value: []byte("v2")})
	return nil
}

// TestSharedReplansWhatTheFollowerMovedUnder: over a shared store, a
// write answered without writing (its record seemed unchanged) is planned
// again when the catalog moved after its plan, even if the catch-up with
// the store's head then finds nothing new: another server's delete applied
// in between made "unchanged" false, and the answer would have been
// acknowledged but not written.
func TestSharedReplansWhatTheFollowerMovedUnder(t *testing.T) {
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.System, Key: "x", Value: []byte("v1")}}}}, true); err != nil {
		t.Fatal(err)
	}
	g := &gatedShared{Store: st, open: make(chan struct{})}
	g.head.Store(1)
	e, err := Open(g, Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	// Another server deletes x; this catalog does not see it yet.
	res, err := st.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.System, Key: "x"}}}}, true)
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	g.head.Store(res[0].Revision)
	w := &putIfAbsent{key: "x", e: e, g: g, target: res[0].Revision}
	if _, err := e.Submit(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if w.plans != 2 {
		t.Fatalf("planned %d times, want again after the follower moved", w.plans)
	}
	found := false
	if _, err := st.Load([]store.Kind{store.System}, func(r store.Record) error { found = found || r.Key == "x"; return nil }); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("acknowledged as unchanged, but the store does not hold x")
	}
}
