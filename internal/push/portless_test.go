package push_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestPortlessIsNotAnEndpoint: an instance registered without a port (a
// Consul service with none: instance.NoPortLabel, port 0) is never an
// endpoint: a subset holding only such instances is empty, so nothing
// routes to it, until an instance with a port joins it.
func TestPortlessIsNotAnEndpoint(t *testing.T) {
	reg := registryWith(t, ordersConfig)
	portless := &instance.Instance{ID: "g3", Namespace: "default", Service: "orders", Host: "10.0.0.3", Weight: 1, Healthy: true,
		Metadata: label.FromMap(map[string]string{"color": "gray", instance.NoPortLabel: ""})}
	if err := instance.Prepare(-1, portless); err != nil {
		t.Fatal(err)
	}
	reg.Upsert(inst("b1", "blue"), portless, inst("s2", "stable"))
	cp := startControlPlane(t, context.Background(), reg, nil)
	c := cp.cache
	blue, gray, stable := "default/orders/blue", "default/orders/gray", "default/orders/stable"
	waitFor(t, func() bool { return slices.Equal(routeClusters(t, c), []string{blue, stable}) })
	if hasCluster(c, gray) {
		t.Fatalf("clusters %v: the gray subset holds only a portless instance, want no cluster for it", c.Names(xds.TypeCluster))
	}
	reg.Upsert(inst("g4", "gray"))
	waitFor(t, func() bool {
		return slices.Equal(routeClusters(t, c), []string{blue, gray, stable}) && hasCluster(c, gray)
	})
}
