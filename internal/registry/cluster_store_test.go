package registry

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/mysql"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// laggingStore is one server's connection to the shared database whose
// catalog stays behind while held: its follower receives the changes the
// database streams but applies them only once released. Asking the store
// for its head (what a server does when it must decide on what is stored)
// releases it, so a server that does so catches up and one that does not
// stays behind.
type laggingStore struct {
	*mysql.Store
	mu   sync.Mutex
	held chan struct{} // nil: not held
}

func (s *laggingStore) hold() {
	s.mu.Lock()
	s.held = make(chan struct{})
	s.mu.Unlock()
}

func (s *laggingStore) release() {
	s.mu.Lock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
	s.mu.Unlock()
}

func (s *laggingStore) Head(ctx context.Context, after int64) (int64, int64, error) {
	s.release()
	return s.Store.Head(ctx, after)
}

func (s *laggingStore) Follow(since int64) (store.Feed, error) {
	f, err := s.Store.Follow(since)
	return laggingFeed{f, s}, err
}

type laggingFeed struct {
	store.Feed
	s *laggingStore
}

func (f laggingFeed) Next(ctx context.Context) ([]store.Change, error) {
	changes, err := f.Feed.Next(ctx)
	f.s.mu.Lock()
	held := f.s.held
	f.s.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return changes, err
}

// openClusterPair opens two registries, as two cluster servers, over one
// fresh database; the second one's catalog can be held behind.
func openClusterPair(t *testing.T) (a, b *Registry, lag *laggingStore) {
	t.Helper()
	url := mysqltest.URL(t, "")
	open := func(st commit.Store) *Registry {
		r, err := Open(st, Options{Cluster: &judge{moved: make(chan struct{})}, KeepHealthAtLoad: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	sa, err := mysql.Open(context.Background(), url, mysql.Options{Rows: map[store.Kind]mysql.Columns{store.Instances: instance.Columns{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sa.Close() })
	sb, err := mysql.Open(context.Background(), url, mysql.Options{Rows: map[store.Kind]mysql.Columns{store.Instances: instance.Columns{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	lag = &laggingStore{Store: sb}
	return open(sa), open(lag), lag
}

// awaitInstance waits until r's catalog holds instance id at revision rev
// at least (absent: rev 0 means gone).
func awaitInstance(t *testing.T, r *Registry, id string, rev int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		in := r.Instances().Get(id)
		if (rev == 0 && in == nil) || (rev > 0 && in != nil && in.Revision >= rev) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not at revision %d in 10 s: %+v", id, rev, in)
		}
	}
}

// answerOrRelease waits for a write's answer; if it does not come while
// the lagging server is held (it waits for its own commit to be applied
// without having asked the store first), the server is released so the
// test fails on the answer instead of hanging.
func answerOrRelease[T any](t *testing.T, lag *laggingStore, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		lag.release()
		return <-ch
	}
}

// TestClusterDeleteDecidedOnTheStore: a DELETE on server B of an instance
// server A deleted just before, while B's catalog has not seen that yet,
// is answered "not found", not 200 with a revision of its own: B's delete
// is conditional on the version it saw, and on a conflict B catches up and
// decides again.
func TestClusterDeleteDecidedOnTheStore(t *testing.T) {
	ctx := context.Background()
	a, b, lag := openClusterPair(t)
	rev, err := a.Register(ctx, []*instance.Instance{testInstance("x", "s", 0)})
	if err != nil {
		t.Fatal(err)
	}
	awaitInstance(t, b, "x", rev)
	lag.hold()
	delRev, notFound, err := a.Deregister(ctx, []string{"x"})
	if err != nil || len(notFound) != 0 {
		t.Fatalf("A's deregister: %v, not found %v", err, notFound)
	}
	type answer struct {
		rev      int64
		notFound []string
		err      error
	}
	ch := make(chan answer, 1)
	go func() { r, nf, err := b.Deregister(ctx, []string{"x"}); ch <- answer{r, nf, err} }()
	got := answerOrRelease(t, lag, ch)
	if got.err != nil || len(got.notFound) != 1 {
		t.Fatalf("B's deregister of what A deleted at %d: revision %d, not found %v, err %v; want not found", delRev, got.rev, got.notFound, got.err)
	}
	if b.Instances().Get("x") != nil {
		t.Fatal("B answered not found while its catalog still holds x")
	}
}
