package registry

import (
	"context"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

func openWith(t *testing.T, dir string, opts Options) (*Registry, func()) {
	t.Helper()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, func() { r.Close(); st.Close() }
}

// settled waits (bounded) until the follower has tracked every applied
// revision, so that the TTL heap holds what the catalog asks for, then
// judges what is due at the injected clock's time.
func settled(t *testing.T, r *Registry) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.eng.Tracked() < r.cat.Revision() {
		if time.Now().After(deadline) {
			t.Fatalf("follower stuck at %d, catalog at %d", r.eng.Tracked(), r.cat.Revision())
		}
		time.Sleep(time.Millisecond)
	}
	r.expireDue(context.Background())
}

// until waits (bounded) until cond holds: a change expireDue judges may
// also be judged by the TTL goroutine, whose commit can still be on its way
// when settled returns.
func until(t *testing.T, r *Registry, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for settled(t, r); !cond(); settled(t, r) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// gone waits (bounded) until instance id is deregistered: the removal is
// a commit, judged by expireDue here or by the TTL goroutine.
func gone(t *testing.T, r *Registry, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.Instances().Get(id) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s not removed", id)
		}
		settled(t, r)
	}
}

// TestRemovalDelay: an instance unhealthy for longer than its removal
// delay is deregistered, durably, with a revision; one without a delay
// (and no server default) stays; a heartbeat before the delay revives.
// After a restart the server default applies to instances without their
// own delay, counted from the TTL deadline the restart gave them.
func TestRemovalDelay(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	dir := t.TempDir()
	r, closeAll := openWith(t, dir, Options{Now: clk.Now})
	withDelay := func(id string) *instance.Instance {
		in := testInstance(id, "s", 5)
		in.DeregisterAfterSeconds = 30
		return in
	}
	if _, err := r.Register(ctx, []*instance.Instance{withDelay("a"), testInstance("b", "s", 5), withDelay("c"), testInstance("d", "s", 0)}); err != nil {
		t.Fatal(err)
	}
	get := func(id string) *instance.Instance { return r.Instances().Get(id) }

	clk.Advance(16 * time.Second) // past 3 x 5s: all unhealthy since 15s
	for _, id := range []string{"a", "b", "c"} {
		until(t, r, id+" unhealthy past 3 x ttl", func() bool { return !get(id).Healthy })
	}
	clk.Advance(28 * time.Second) // 44s: 29s unhealthy, under 30
	settled(t, r)
	if get("a") == nil || get("c") == nil {
		t.Fatal("removed before its delay")
	}
	if _, err := r.Heartbeat(ctx, []string{"c"}); err != nil {
		t.Fatal(err)
	}
	rev := r.cat.Revision()
	clk.Advance(2 * time.Second) // 46s: a is past 15s + 30s
	gone(t, r, "a")
	if r.cat.Revision() <= rev {
		t.Fatal("the removal took no revision")
	}
	changes, _, _, err := r.cat.Changes(rev, 100)
	if err != nil || len(changes) == 0 || changes[len(changes)-1].ID != "a" || changes[len(changes)-1].Value != nil {
		t.Fatalf("change feed after %d: %+v %v", rev, changes, err)
	}
	if c := get("c"); c == nil || !c.Healthy {
		t.Fatalf("c, revived by a heartbeat before its delay: %+v", c)
	}
	clk.Advance(time.Hour)
	settled(t, r)
	if b, d := get("b"), get("d"); b == nil || b.Healthy || d == nil {
		t.Fatalf("without a delay: b=%+v d=%+v, want b kept unhealthy and d kept", b, d)
	}
	gone(t, r, "c") // expired again, and removed 30s after: an hour passed
	closeAll()

	// Restart with a server default of 10s: b is healthy again (a restart
	// gives every instance 3 x ttl of grace), then unhealthy at 15s, then
	// removed 10s later; the removal a was is durable.
	r, closeAll = openWith(t, dir, Options{Now: clk.Now, DeregisterAfter: 10 * time.Second})
	defer closeAll()
	if get("a") != nil || get("b") == nil || !get("b").Healthy {
		t.Fatalf("after restart: a=%+v b=%+v", get("a"), get("b"))
	}
	clk.Advance(16 * time.Second)
	until(t, r, "b unhealthy 16s after the restart", func() bool { b := get("b"); return b != nil && !b.Healthy })
	clk.Advance(8 * time.Second) // 9s unhealthy
	settled(t, r)
	if get("b") == nil {
		t.Fatal("b removed before the server's default delay")
	}
	clk.Advance(2 * time.Second)
	gone(t, r, "b")
	if get("d") == nil {
		t.Fatal("d, without a TTL, was removed")
	}
}

// TestClusterRemovalByJudge: in cluster mode only the server that judges
// an instance's TTL removes it; a server that takes the judgement over
// (a new term) counts the delay from the grace period it gives, so the
// removal comes late, never early.
func TestClusterRemovalByJudge(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	clk.ns.Store(time.Now().Add(time.Hour).UnixNano()) // the TTL goroutine's real-time timer stays out of the way
	j := &judge{term: 1, moved: make(chan struct{}, 1)}
	r, closeAll := openWith(t, t.TempDir(), Options{Now: clk.Now, Cluster: j})
	defer closeAll()
	in := testInstance("a", "s", 1)
	in.DeregisterAfterSeconds = 5
	if _, err := r.Register(ctx, []*instance.Instance{in}); err != nil {
		t.Fatal(err)
	}
	get := func() *instance.Instance { return r.Instances().Get("a") }
	clk.Advance(4 * time.Second) // unhealthy since 3s
	for i := 0; get().Healthy; i++ {
		if i == 500 {
			t.Fatal("a not expired")
		}
		settled(t, r)
	}
	j.set(0) // another server judges a now
	clk.Advance(10 * time.Second)
	settled(t, r)
	if get() == nil {
		t.Fatal("removed by a server that does not judge it")
	}
	j.set(2) // judged here again, in a new term: grace to 17s, removal at 22s
	j.moved <- struct{}{}
	clk.Advance(100 * time.Millisecond)
	for i := 0; ; i++ {
		v, ok := r.live.Load("a")
		if ok && v.(*liveness).term.Load() == 2 {
			break
		}
		if i == 5000 {
			t.Fatal("a not taken over in term 2")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Advance(7800 * time.Millisecond) // 21.9s
	settled(t, r)
	if get() == nil {
		t.Fatal("removed before the new judge's grace and delay passed")
	}
	clk.Advance(200 * time.Millisecond)
	gone(t, r, "a")
}
