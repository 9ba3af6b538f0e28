package commit

import (
	"context"
	"testing"

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
