package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
)

func checkedInstance(id string, ttl int) *instance.Instance {
	in := testInstance(id, "s", ttl)
	in.Checks = []instance.Check{{ID: "web", Type: instance.CheckTCP, Interval: time.Second}, {ID: "beat", Type: instance.CheckTTL, TTL: 10 * time.Second, Status: instance.StatusPassing}}
	if err := instance.Prepare(-1, in); err != nil {
		panic(err)
	}
	return in
}

func TestSetCheck(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	dir := t.TempDir()
	r, closeAll := open(t, dir, clk.Now)
	if _, err := r.Register(ctx, []*instance.Instance{checkedInstance("a", 5)}); err != nil {
		t.Fatal(err)
	}
	get := func() *instance.Instance { return r.Instances().Get("a") }
	if in := get(); in.Healthy || in.Check("web").Status != instance.StatusCritical || in.Check("beat").Status != instance.StatusPassing {
		t.Fatalf("new checks: healthy %v, %+v", in.Healthy, in.Checks)
	}
	rev, err := r.SetCheck(ctx, "a", "web", instance.StatusWarning, "slow")
	if err != nil {
		t.Fatal(err)
	}
	in := get()
	if !in.Healthy || in.Revision != rev || in.Check("web").Output != "slow" || !in.Check("web").ChangedAt.Equal(clk.Now()) {
		t.Fatalf("after warning: healthy %v rev %d/%d %+v", in.Healthy, in.Revision, rev, in.Check("web"))
	}
	// The same status and output again writes nothing.
	if again, err := r.SetCheck(ctx, "a", "web", instance.StatusWarning, "slow"); err != nil || again != rev || get() != in {
		t.Fatalf("unchanged SetCheck: rev %d (want %d), %v", again, rev, err)
	}
	// Errors.
	if _, err := r.SetCheck(ctx, "nope", "web", instance.StatusPassing, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown instance: %v", err)
	}
	if _, err := r.SetCheck(ctx, "a", "nope", instance.StatusPassing, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown check: %v", err)
	}
	var fe *instance.FieldError
	if _, err := r.SetCheck(ctx, "a", "web", "ok", ""); !errors.As(err, &fe) || fe.Field != "status" || !errors.Is(err, instance.ErrInvalid) {
		t.Fatalf("unknown status: %v", err)
	}
	// A re-register with the same definitions keeps the state; a TTL
	// expiry and a critical check both make it unhealthy, and it turns
	// healthy only when both are gone.
	if _, err := r.Register(ctx, []*instance.Instance{checkedInstance("a", 5)}); err != nil {
		t.Fatal(err)
	}
	if in := get(); in.Check("web").Status != instance.StatusWarning || !in.Healthy {
		t.Fatalf("re-register lost the state: %+v", in.Checks)
	}
	if _, err := r.SetCheck(ctx, "a", "web", instance.StatusCritical, "refused"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(16 * time.Second)
	r.expireDue(ctx)
	if in := get(); in.Healthy || !in.TTLExpired {
		t.Fatalf("expired and critical: healthy %v expired %v", in.Healthy, in.TTLExpired)
	}
	if _, err := r.SetCheck(ctx, "a", "web", instance.StatusPassing, "ok"); err != nil {
		t.Fatal(err)
	}
	if in := get(); in.Healthy {
		t.Fatal("healthy with its TTL expired")
	}
	if _, err := r.Heartbeat(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if in := get(); !in.Healthy || in.TTLExpired {
		t.Fatalf("heartbeat and passing: healthy %v expired %v", in.Healthy, in.TTLExpired)
	}
	if _, err := r.SetCheck(ctx, "a", "web", instance.StatusCritical, "refused again"); err != nil {
		t.Fatal(err)
	}
	// The state is durable: a restart keeps it (the heartbeat is judged
	// afresh).
	closeAll()
	r, closeAll = open(t, dir, clk.Now)
	defer closeAll()
	if in := get(); in.Healthy || in.Check("web").Status != instance.StatusCritical || in.Check("web").Output != "refused again" {
		t.Fatalf("after a restart: healthy %v %+v", in.Healthy, in.Check("web"))
	}
}

// TestSetCheckKeepsConcurrentRegister: a check's status written while the
// instance is re-registered with other metadata never undoes the register.
func TestSetCheckKeepsConcurrentRegister(t *testing.T) {
	ctx := context.Background()
	r, closeAll := open(t, t.TempDir(), time.Now)
	defer closeAll()
	if _, err := r.Register(ctx, []*instance.Instance{checkedInstance("a", 0)}); err != nil {
		t.Fatal(err)
	}
	const rounds = 200
	done := make(chan error, 1)
	go func() {
		for i := range rounds {
			st := instance.StatusPassing
			if i%2 == 1 {
				st = instance.StatusCritical
			}
			if _, err := r.SetCheck(ctx, "a", "web", st, ""); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range rounds {
		in := checkedInstance("a", 0)
		in.Weight = i + 1
		if _, err := r.Register(ctx, []*instance.Instance{in}); err != nil {
			t.Fatal(err)
		}
		if got := r.Instances().Get("a").Weight; got != i+1 {
			t.Fatalf("register %d: weight %d", i, got)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestTTLDeadline(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	r, closeAll := open(t, t.TempDir(), clk.Now)
	defer closeAll()
	if _, err := r.Register(ctx, []*instance.Instance{checkedInstance("a", 0)}); err != nil {
		t.Fatal(err)
	}
	c := r.Instances().Get("a").Check("beat")
	start := clk.Now()
	if d := r.TTLDeadline("a", c); !d.Equal(start.Add(10 * time.Second)) {
		t.Fatalf("first deadline %v", d)
	}
	clk.Advance(4 * time.Second)
	if _, err := r.SetCheck(ctx, "a", "beat", instance.StatusPassing, ""); err != nil {
		t.Fatal(err)
	}
	if d := r.TTLDeadline("a", c); !d.Equal(start.Add(14 * time.Second)) {
		t.Fatalf("deadline after a pass %v", d)
	}
	if _, err := r.SetCheck(ctx, "a", "beat", instance.StatusCritical, ""); err != nil {
		t.Fatal(err)
	}
	if d := r.TTLDeadline("a", c); !d.Equal(start.Add(14 * time.Second)) {
		t.Fatalf("a critical update moved the deadline: %v", d)
	}
	if _, _, err := r.Deregister(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.checkTTL.Load("a"); ok {
		t.Fatal("deadlines of a deregistered instance kept")
	}
}
