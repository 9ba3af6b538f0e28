package registry

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// judge is a scripted Cluster: this server judges every instance in term
// (0: none), relays nothing, and signals Moved only when told.
type judge struct {
	mu    sync.Mutex
	term  uint64
	moved chan struct{}
	// heard is HeardUntil; 0 means every relayed heartbeat is collected.
	heard atomic.Int64
}

func (j *judge) HeardUntil() int64 {
	if h := j.heard.Load(); h != 0 {
		return h
	}
	return math.MaxInt64
}

func (j *judge) Judge(string) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.term
}
func (j *judge) Relay(string, int64)    {}
func (j *judge) Moved() <-chan struct{} { return j.moved }
func (j *judge) set(term uint64) {
	j.mu.Lock()
	j.term = term
	j.mu.Unlock()
}

// TestClusterNewTermGrace: when this server judges again in a new term (its
// lease lapsed and came back, so the others may have judged its instances
// and taken their heartbeats meanwhile), every instance it judges gets a
// full 3 x ttl of grace from then, even if it never saw itself stop judging
// and no Moved has arrived yet.
func TestClusterNewTermGrace(t *testing.T) {
	ctx := context.Background()
	// An hour ahead: the TTL goroutine's timer (real time) never fires
	// during the test, and a register's commit time (the store's clock,
	// which cluster servers count as a heartbeat) is long past. The test's
	// own expireDue calls judge; the goroutine may still join in when a
	// heap push wakes it, so outcomes are awaited, never assumed.
	clk := newClock()
	clk.ns.Store(time.Now().Add(time.Hour).UnixNano())
	t0 := clk.Now()
	j := &judge{term: 1, moved: make(chan struct{}, 1)}
	r := openOn(t, storeWith(t), Options{Now: clk.Now, Cluster: j})
	if _, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s", 1)}); err != nil {
		t.Fatal(err)
	}
	healthy := func() bool { return r.Instances().Get("a").Healthy }
	var l *liveness
	for i := 0; l == nil; i++ { // the follower tracks it just after applying it
		if i == 500 {
			t.Fatal("a has no TTL state")
		}
		if v, ok := r.live.Load("a"); ok {
			l = v.(*liveness)
		}
		time.Sleep(2 * time.Millisecond)
	}
	graced := func() bool { return l.deadline.Load() >= t0.Add(6500*time.Millisecond).UnixNano() }
	await := func(what string, done func() bool) {
		t.Helper()
		for i := 0; !done(); i++ {
			if i == 500 {
				t.Fatalf("%s: not within 500 rounds", what)
			}
			r.expireDue(ctx)
			time.Sleep(2 * time.Millisecond)
		}
	}

	clk.Advance(2 * time.Second)
	r.expireDue(ctx)
	if !healthy() {
		t.Fatal("unhealthy inside 3 x ttl")
	}
	// Term 2 begins at 2s: a's last heartbeat here was at 0s, any later
	// one went to the server that judged it meanwhile.
	j.set(2)
	clk.Advance(1500 * time.Millisecond)
	// a is due at 3s, in a term it was not judged in yet: grace until 6.5s.
	await("a judged at 3.5s", func() bool { return graced() || !healthy() })
	if !healthy() || !graced() {
		t.Fatalf("at 3.5s, first judged in a new term: healthy %v, deadline %v after the start (want a grace period to 6.5s)",
			healthy(), time.Duration(l.deadline.Load()-t0.UnixNano()))
	}
	clk.Advance(2900 * time.Millisecond)
	r.expireDue(ctx)
	if !healthy() {
		t.Fatal("expired at 6.4s, inside the new term's grace period")
	}
	clk.Advance(200 * time.Millisecond)
	await("a expires after the grace period (6.6s)", func() bool { return !healthy() })
}

// headless is the embedded store made to look shared (it has a Head), whose
// head cannot be read.
type headless struct {
	*embedded.Store
}

func (headless) Head(context.Context, int64) (int64, int64, error) {
	return 0, 0, errors.New("database unreachable")
}

// TestClusterUnchangedNeedsACurrentCatalog: in cluster mode a register the
// catalog finds unchanged is answered without a write only once the
// catalog is shown current (another server may have deregistered the
// instance). When the store's head cannot be read, the request fails as
// unavailable instead of being acknowledged with nothing written.
func TestClusterUnchangedNeedsACurrentCatalog(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := Open(headless{st}, Options{Cluster: &judge{term: 1, moved: make(chan struct{}, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s", 1)}); err != nil {
		t.Fatal(err)
	}
	rev, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s", 1)})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("unchanged register with an unreadable head: revision %d, err %v; want ErrUnavailable", rev, err)
	}
	// A write that changes something commits as usual.
	if _, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s", 2)}); err != nil {
		t.Fatal(err)
	}
}

// TestClusterExpiryWaitsForRelayedHeartbeats: an instance whose deadline
// passed is not expired while the collection of heartbeats other servers
// relayed here lags behind that deadline (a stuck collection would have
// expired an instance heartbeating through another server); once the
// collection catches up it is judged on what it brought.
func TestClusterExpiryWaitsForRelayedHeartbeats(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	clk.ns.Store(time.Now().Add(time.Hour).UnixNano()) // see TestClusterNewTermGrace
	t0 := clk.Now()
	j := &judge{term: 1, moved: make(chan struct{}, 1)}
	j.heard.Store(t0.UnixNano())
	r := openOn(t, storeWith(t), Options{Now: clk.Now, Cluster: j})
	for _, id := range []string{"beating", "silent"} {
		if _, err := r.Register(ctx, []*instance.Instance{testInstance(id, "s", 1)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ { // the follower tracks them just after applying them
		_, a := r.live.Load("beating")
		_, b := r.live.Load("silent")
		if a && b {
			break
		}
		if i == 5000 {
			t.Fatal("no TTL state")
		}
		time.Sleep(time.Millisecond)
	}
	healthy := func(id string) bool { return r.Instances().Get(id).Healthy }
	// Both deadlines (3 x 1 s) pass; the collection is stuck at t0.
	clk.Advance(5 * time.Second)
	for range 3 {
		r.expireDue(ctx)
	}
	if !healthy("beating") || !healthy("silent") {
		t.Fatal("expired while relayed heartbeats from before the deadline may still be uncollected")
	}
	// The collection catches up: it brings a heartbeat "beating" sent
	// through another server at 4 s, and none for "silent".
	r.Beat("beating", t0.Add(4*time.Second).UnixNano())
	j.heard.Store(clk.Now().UnixNano())
	clk.Advance(time.Second) // past the retry of the postponed judgement
	for i := 0; healthy("silent"); i++ {
		if i == 500 {
			t.Fatal("silent not expired once the collection caught up")
		}
		r.expireDue(ctx)
		time.Sleep(2 * time.Millisecond)
	}
	if !healthy("beating") {
		t.Fatal("beating expired at 6 s though a relayed heartbeat at 4 s moved its deadline to 7 s")
	}
}

// TestClusterConflictWithoutHeadIsUnavailable: a DELETE that lost a race
// to another server and cannot catch up (the database does not answer) is
// unavailable (503: nothing written, retry), not a conflict (409, which the
// API does not give for a DELETE).
func TestClusterConflictWithoutHeadIsUnavailable(t *testing.T) {
	ctx := context.Background()
	g := &gatedStore{Store: storeWith(t, testInstance("x", "s", 0)), gate: make(chan struct{}), committed: make(chan struct{}, 8)}
	r := openOn(t, headlessGated{g}, Options{Cluster: &judge{term: 1, moved: make(chan struct{}, 1)}})
	replaceBehind(t, g, "x")
	_, _, err := r.Deregister(ctx, []string{"x"})
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("DELETE that lost a race with no way to catch up: %v; want unavailable, not a conflict", err)
	}
}

// replaceBehind stores a new version of instance id as another server
// would: in the store, not in the catalog of g's registry (its feed held).
func replaceBehind(t *testing.T, g *gatedStore, id string) {
	t.Helper()
	in := testInstance(id, "s", 0)
	in.Port = 99
	if _, err := g.Store.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.Instances, Key: id, Value: in.AppendBinary(nil)}}}}, true); err != nil {
		t.Fatal(err)
	}
}

// headlessGated is gatedStore made to look shared, whose head cannot be
// read.
type headlessGated struct{ *gatedStore }

func (headlessGated) Head(context.Context, int64) (int64, int64, error) {
	return 0, 0, errors.New("database unreachable")
}
