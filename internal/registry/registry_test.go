package registry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/cockroachdb/pebble.(*DB).maybeScheduleFlush"))
}

// clock is an injectable time source for TTL tests.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func open(t *testing.T, dir string, now func() time.Time) (*Registry, func()) {
	t.Helper()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(st, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return r, func() { r.Close(); st.Close() }
}

func testInstance(id, service string, ttl int) *instance.Instance {
	in := &instance.Instance{ID: id, Service: service, Host: "10.0.0.1", Port: 80, Weight: instance.DefaultWeight, TTLSeconds: ttl,
		Metadata: label.FromMap(map[string]string{"zone": "z1"})}
	if err := instance.Prepare(-1, in); err != nil {
		panic(err)
	}
	return in
}

func TestTTLHealth(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	r, closeAll := open(t, t.TempDir(), clk.Now)
	defer closeAll()
	if _, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s", 5), testInstance("b", "s", 5), testInstance("c", "s", 0)}); err != nil {
		t.Fatal(err)
	}
	healthy := func(id string) bool { return r.Instances().Get(id).Healthy }

	clk.Advance(14 * time.Second) // under 3 x 5s
	r.expireDue(ctx)
	if !healthy("a") || !healthy("b") {
		t.Fatal("unhealthy before 3 x ttl")
	}
	if nf, err := r.Heartbeat(ctx, []string{"a"}); err != nil || len(nf) != 0 {
		t.Fatalf("heartbeat: %v %v", nf, err)
	}
	clk.Advance(2 * time.Second) // b is past 15s, a was renewed at 14s
	rev := r.cat.Revision()
	r.expireDue(ctx)
	if !healthy("a") || healthy("b") || !healthy("c") {
		t.Fatalf("after 16s: a=%v b=%v c=%v, want true false true", healthy("a"), healthy("b"), healthy("c"))
	}
	if r.cat.Revision() != rev+1 || r.Instances().Get("b").Revision != rev+1 {
		t.Fatalf("expiry must take a new revision: catalog %d, b %d, before %d", r.cat.Revision(), r.Instances().Get("b").Revision, rev)
	}
	if got := r.Instances().Lookup(naming.ServiceKey{Namespace: "default", Name: "s"}).ReadyLen(); got != 2 {
		t.Fatalf("healthy count %d, want 2", got)
	}
	// Expiring again changes nothing.
	clk.Advance(time.Minute)
	r.expireDue(ctx)
	if healthy("a") {
		t.Fatal("a should have expired after a minute without heartbeats")
	}
	rev = r.cat.Revision()
	r.expireDue(ctx)
	if r.cat.Revision() != rev {
		t.Fatal("a second expiry pass moved the revision")
	}
	// A heartbeat revives, with a new revision, and re-arms the TTL.
	if _, err := r.Heartbeat(ctx, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if !healthy("b") || r.cat.Revision() != rev+1 {
		t.Fatalf("heartbeat did not revive b with a new revision (healthy %v, revision %d)", healthy("b"), r.cat.Revision())
	}
	clk.Advance(16 * time.Second)
	r.expireDue(ctx)
	if healthy("b") {
		t.Fatal("revived b did not expire again")
	}
	// A register counts as a heartbeat and revives too.
	if _, err := r.Register(ctx, []*instance.Instance{testInstance("b", "s", 5)}); err != nil {
		t.Fatal(err)
	}
	if !healthy("b") {
		t.Fatal("register did not revive b")
	}
}

func TestRestartGrace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := newClock()
	r, closeAll := open(t, dir, clk.Now)
	if _, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s", 1), testInstance("b", "s", 0)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Deregister(ctx, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	r.expireDue(ctx)
	if r.Instances().Get("a").Healthy {
		t.Fatal("a should be unhealthy before the restart")
	}
	before := r.Instances().Get("a")
	closeAll()

	clk.Advance(time.Hour)
	r, closeAll = open(t, dir, clk.Now)
	defer closeAll()
	a := r.Instances().Get("a")
	if a == nil || !a.Healthy || r.Instances().Get("b") != nil {
		t.Fatalf("after restart: a=%+v b=%v", a, r.Instances().Get("b"))
	}
	if !a.CreatedAt.Equal(before.CreatedAt) || a.Host != before.Host || !a.Metadata.Equal(label.FromMap(map[string]string{"zone": "z1"})) {
		t.Fatalf("a changed across restart: %+v vs %+v", a, before)
	}
	if got := r.Instances().Lookup(a.Key()).Revision; got < r.cat.Revision() {
		t.Fatalf("service revision %d after restart, want the store revision %d so old watchers wake", got, r.cat.Revision())
	}
	clk.Advance(2900 * time.Millisecond) // inside the 3 x 1s grace
	r.expireDue(ctx)
	if !r.Instances().Get("a").Healthy {
		t.Fatal("expired inside the grace period")
	}
	clk.Advance(200 * time.Millisecond)
	r.expireDue(ctx)
	if r.Instances().Get("a").Healthy {
		t.Fatal("not expired after the grace period")
	}
}

// TestGroupCommit sends many concurrent registers: each gets its own
// revision, all distinct, and the commits are fewer than the requests.
func TestGroupCommit(t *testing.T) {
	ctx := context.Background()
	r, closeAll := open(t, t.TempDir(), nil)
	defer closeAll()
	const n = 400
	revs := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rev, err := r.Register(ctx, []*instance.Instance{testInstance(fmt.Sprintf("i%d", i), fmt.Sprintf("s%d", i%7), 0)})
			if err != nil {
				t.Error(err)
			}
			revs[i] = rev
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	for i, rev := range revs {
		if rev < 1 || rev > n || seen[rev] {
			t.Fatalf("request %d got revision %d (duplicate or out of 1..%d)", i, rev, n)
		}
		seen[rev] = true
		if got := r.Instances().Get(fmt.Sprintf("i%d", i)); got == nil || got.Revision != rev {
			t.Fatalf("instance i%d carries %v, want revision %d", i, got, rev)
		}
	}
	if r.cat.Revision() != n || r.Instances().Len() != n {
		t.Fatalf("catalog revision %d, %d instances; want %d", r.cat.Revision(), r.Instances().Len(), n)
	}
}

func TestClosedRegistry(t *testing.T) {
	r, closeAll := open(t, t.TempDir(), nil)
	closeAll()
	if _, err := r.Register(context.Background(), []*instance.Instance{testInstance("a", "s", 0)}); err != commit.ErrClosed {
		t.Fatalf("register after close: %v, want commit.ErrClosed", err)
	}
}
