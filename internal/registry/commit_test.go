package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// failingStore is the real embedded store with injected commit failures
// (a fake only in that: a disk that fails on demand cannot be had here).
type failingStore struct {
	*embedded.Store
	mu      sync.Mutex
	hold    chan struct{} // if set, the next Commit waits for it to close
	held    chan struct{} // closed when a Commit is waiting on hold
	failing bool
	commits int
}

var errDisk = errors.New("disk on fire")

func (s *failingStore) Commit(txns []store.Txn, sync bool) ([]store.Result, error) {
	if err := s.before(); err != nil {
		return nil, err
	}
	return s.Store.Commit(txns, sync)
}

// CommitAsync overrides the embedded store's, which the registry prefers.
func (s *failingStore) CommitAsync(txns []store.Txn, sync bool) ([]store.Result, func() error, error) {
	if err := s.before(); err != nil {
		return nil, nil, err
	}
	return s.Store.CommitAsync(txns, sync)
}

// before holds and fails a commit as asked.
func (s *failingStore) before() error {
	s.mu.Lock()
	hold, held := s.hold, s.held
	s.hold = nil
	s.mu.Unlock()
	if hold != nil {
		close(held)
		<-hold
	}
	s.mu.Lock()
	s.commits++
	fail := s.failing
	s.mu.Unlock()
	if fail {
		return errDisk
	}
	return nil
}

// TestFailedCommitFailsItsWholeBatch: the requests grouped into a commit
// that fails all fail, none of them reaches the catalog or the store, and
// the registry goes on with the next batch.
func TestFailedCommitFailsItsWholeBatch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	es, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := &failingStore{Store: es}
	r, err := Open(st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { r.Close(); es.Close() }()

	// Hold the first commit so that the next requests queue behind it and
	// are grouped into one batch, which then fails.
	st.mu.Lock()
	st.hold, st.held = make(chan struct{}), make(chan struct{})
	hold, held := st.hold, st.held
	st.mu.Unlock()
	first := make(chan error, 1)
	go func() {
		_, err := r.Register(ctx, []*instance.Instance{testInstance("first", "s", 0)})
		first <- err
	}()
	<-held
	const n = 20
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := r.Register(ctx, []*instance.Instance{testInstance(fmt.Sprintf("b%d", i), "s", 0)})
			errs <- err
		}()
	}
	waitQueued(t, r, n)
	st.mu.Lock()
	st.failing = true // the held commit fails too: everything until now
	st.mu.Unlock()
	close(hold)
	if err := <-first; !errors.Is(err, errDisk) {
		t.Fatalf("held request: %v, want the disk error", err)
	}
	for range n {
		if err := <-errs; !errors.Is(err, errDisk) {
			t.Fatalf("a request of the failed batch answered %v", err)
		}
	}
	if r.Instances().Len() != 0 || r.cat.Revision() != 0 {
		t.Fatalf("failed commits reached the catalog: %d instances at %d", r.Instances().Len(), r.cat.Revision())
	}
	st.mu.Lock()
	st.failing = false
	commits := st.commits
	st.mu.Unlock()
	if commits > 3 {
		t.Fatalf("%d commits for 21 requests queued together", commits)
	}
	rev, err := r.Register(ctx, []*instance.Instance{testInstance("after", "s", 0)})
	if err != nil || rev != 1 || r.Instances().Get("after") == nil {
		t.Fatalf("after the failure: rev %d err %v", rev, err)
	}
	var keys []string
	if _, err := es.Load([]store.Kind{store.Instances}, func(rec store.Record) error { keys = append(keys, rec.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[after]" {
		t.Fatalf("store holds %v, want only [after]", keys)
	}
}

func waitQueued(t *testing.T, r *Registry, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.eng.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d", r.eng.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConflictFailsOnlyItsWrite: a write whose store condition fails gets
// the conflict; the other writes of its batch commit.
func TestConflictFailsOnlyItsWrite(t *testing.T) {
	ctx := context.Background()
	r, closeAll := open(t, t.TempDir(), nil)
	defer closeAll()
	if _, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s", 5)}); err != nil {
		t.Fatal(err)
	}
	stale := r.Instances().Get("a")
	if _, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s2", 5)}); err != nil {
		t.Fatal(err)
	}
	// A health flip planned against the replaced version is skipped by the
	// planner; one whose condition names a stale revision fails in the store.
	w := &conditional{rev: stale.Revision}
	if _, err := r.eng.Submit(ctx, w); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale conditional write: %v, want a conflict", err)
	}
	w = &conditional{rev: r.Instances().Get("a").Revision}
	if rev, err := r.eng.Submit(ctx, w); err != nil || r.Instances().Get("a").Port != 9 || r.Instances().Get("a").Revision != rev {
		t.Fatalf("current conditional write: rev %d err %v", rev, err)
	}
}

// conditional replaces instance a with port 9 if it is still at rev.
type conditional struct{ rev int64 }

func (w *conditional) Plan(tx *commit.Tx) error {
	v, _ := tx.Get(store.Instances, "a")
	n := v.(*instance.Instance).Clone()
	n.Port = 9
	tx.PutIf(store.Instances, "a", n.AppendBinary(nil), n, w.rev)
	return nil
}

// TestFailedExpiryIsJudgedAgain: a TTL expiry whose commit fails is not
// dropped: once the store works again the instance turns unhealthy.
func TestFailedExpiryIsJudgedAgain(t *testing.T) {
	ctx := context.Background()
	es, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	st := &failingStore{Store: es}
	clk := newClock()
	r, err := Open(st, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s", 1)}); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.failing = true
	st.mu.Unlock()
	clk.Advance(4 * time.Second)
	r.expireDue(ctx)
	if !r.Instances().Get("a").Healthy {
		t.Fatal("a failed commit flipped the instance")
	}
	st.mu.Lock()
	st.failing = false
	st.mu.Unlock()
	clk.Advance(time.Second)
	r.expireDue(ctx)
	if r.Instances().Get("a").Healthy {
		t.Fatal("the expiry whose commit failed was never judged again")
	}
}
