package push_test

import (
	"context"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestEveryEDSClusterHasEndpoints: while CDS still carries the whole
// service's cluster that routes naming only subsets made unused (its grace
// period), its endpoint set stays: an Envoy asking for a cluster's
// endpoints and not answered keeps that cluster warming. Both go together.
func TestEveryEDSClusterHasEndpoints(t *testing.T) {
	reg := pushtest.New(0)
	reg.Upsert(inst("b1", "blue"), inst("s2", "stable"))
	cp := startControlPlane(t, context.Background(), reg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cp.engine.WaitPublished(ctx, reg.Revision()); err != nil {
		t.Fatal(err)
	}
	// The service first, then routes that name only its subsets: the
	// whole service's cluster stops being named.
	objs, err := config.Decode([]byte(ordersConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		reg.ApplyConfig(o)
	}
	if err := cp.engine.WaitPublished(ctx, reg.Revision()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"default/orders", "default/orders/blue", "default/orders/stable"} {
		_, _, c := cp.cache.Get(xds.TypeCluster, name)
		_, _, e := cp.cache.Get(xds.TypeEndpoint, name)
		if !c || !e {
			t.Errorf("after the routes: cluster %s in CDS %v, its endpoint set %v; want both", name, c, e)
		}
	}
	// After the grace period the whole service's cluster goes, and its
	// endpoint set with it (no set left behind).
	for until := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, _, c := cp.cache.Get(xds.TypeCluster, "default/orders")
		_, _, e := cp.cache.Get(xds.TypeEndpoint, "default/orders")
		if !c && !e {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("10 s after the routes: the whole service's cluster in CDS %v, its endpoint set %v; want neither", c, e)
		}
	}
}
