package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
)

// TestSyncOwnership: instances a sync owns are read-only through
// Register, Deregister and SetCheck (an *OwnedError naming the owner); a
// client may not claim an owner; a sync replaces and deletes its own
// instances in one write and refuses to touch the APIs' instances.
func TestSyncOwnership(t *testing.T) {
	r, closeAll := open(t, t.TempDir(), nil)
	defer closeAll()
	ctx := context.Background()
	mk := func(id, owner string) *instance.Instance {
		in := &instance.Instance{ID: id, Service: "s", Host: "10.0.0.1", Port: 80}
		if owner != "" {
			in.Metadata = label.FromMap(map[string]string{instance.OwnerLabel: owner})
			in.Checks = []instance.Check{{ID: "ready", Type: instance.CheckTTL, TTL: time.Hour, Status: instance.StatusCritical}}
		}
		if err := instance.Prepare(0, in); err != nil {
			t.Fatal(err)
		}
		return in
	}
	if _, err := r.Register(ctx, []*instance.Instance{mk("api", "")}); err != nil {
		t.Fatal(err)
	}
	var fe *instance.FieldError
	if _, err := r.Register(ctx, []*instance.Instance{mk("claim", "kubernetes")}); !errors.As(err, &fe) || fe.Field != "metadata."+instance.OwnerLabel {
		t.Fatalf("a client claiming an owner: %v", err)
	}
	if _, err := r.Sync(ctx, "kubernetes", []*instance.Instance{mk("k1", "kubernetes"), mk("k2", "kubernetes")}, nil); err != nil {
		t.Fatal(err)
	}
	if in := r.Instances().Get("k1"); in == nil || in.Healthy {
		t.Fatalf("synced k1 with a critical check: %+v", in)
	}
	var owned *OwnedError
	if _, err := r.Register(ctx, []*instance.Instance{mk("k1", "")}); !errors.As(err, &owned) || owned.Owner != "kubernetes" {
		t.Fatalf("register over an owned instance: %v", err)
	}
	if _, _, err := r.Deregister(ctx, []string{"k1"}); !errors.As(err, &owned) {
		t.Fatalf("deregister of an owned instance: %v", err)
	}
	if _, err := r.SetCheck(ctx, "k1", "ready", instance.StatusPassing, ""); !errors.As(err, &owned) {
		t.Fatalf("set check of an owned instance: %v", err)
	}
	if _, err := r.Sync(ctx, "kubernetes", nil, []string{"api"}); err == nil || r.Instances().Get("api") == nil {
		t.Fatalf("a sync deleting the API's instance: %v", err)
	}
	// One write: k3 in, k1 out (k2 kept), k2 now passing (no check).
	k2 := mk("k2", "kubernetes")
	k2.Checks = nil
	if _, err := r.Sync(ctx, "kubernetes", []*instance.Instance{mk("k3", "kubernetes"), k2}, []string{"k1", "gone"}); err != nil {
		t.Fatal(err)
	}
	if r.Instances().Get("k1") != nil || r.Instances().Get("k3") == nil || !r.Instances().Get("k2").Healthy {
		t.Fatal("sync write not applied")
	}
}
