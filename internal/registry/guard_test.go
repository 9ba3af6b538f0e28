package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// TestGuardedWrites: a guard refusal fails the whole write and nothing of
// it is written; the guard sees the version stored now.
func TestGuardedWrites(t *testing.T) {
	r, closeAll := open(t, t.TempDir(), nil)
	defer closeAll()
	ctx := context.Background()
	mk := func(id, ns string) *instance.Instance {
		in := &instance.Instance{ID: id, Namespace: ns, Service: "s", Host: "10.0.0.1", Port: 80}
		if err := instance.Prepare(0, in); err != nil {
			t.Fatal(err)
		}
		return in
	}
	if _, err := r.Register(ctx, []*instance.Instance{mk("x", "b")}); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("not in b")
	var seen []string
	onlyA := func(cur *instance.Instance) error {
		seen = append(seen, cur.ID+"@"+cur.Namespace)
		if cur.Namespace != "a" {
			return refused
		}
		return nil
	}
	// x lives in b: moving it to a is refused, and y of the same batch is not written.
	if _, err := r.RegisterGuarded(ctx, []*instance.Instance{mk("y", "a"), mk("x", "a")}, onlyA); !errors.Is(err, refused) {
		t.Fatalf("register over b's instance: %v", err)
	}
	if r.Instances().Get("y") != nil || r.Instances().Get("x").Namespace != "b" {
		t.Fatal("a refused write was partly applied")
	}
	if _, _, err := r.DeregisterGuarded(ctx, []string{"x", "nope"}, onlyA); !errors.Is(err, refused) {
		t.Fatalf("deregister of b's instance: %v", err)
	}
	if r.Instances().Get("x") == nil {
		t.Fatal("a refused deregister deleted")
	}
	if _, err := r.RegisterGuarded(ctx, []*instance.Instance{mk("y", "a")}, onlyA); err != nil {
		t.Fatal(err)
	}
	if _, nf, err := r.DeregisterGuarded(ctx, []string{"y", "nope"}, onlyA); err != nil || len(nf) != 1 {
		t.Fatalf("allowed deregister: %v %v", nf, err)
	}
	if len(seen) < 3 {
		t.Fatalf("guard saw %v", seen)
	}
}
