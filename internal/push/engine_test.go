package push_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

var orders = naming.ServiceKey{Namespace: "default", Name: "orders"}

func inst(id, color string) *instance.Instance {
	return &instance.Instance{ID: id, Namespace: "default", Service: "orders", Host: "10.0.0." + id[len(id)-1:], Port: 80,
		Weight: 1, Healthy: true, Metadata: label.FromMap(map[string]string{"color": color})}
}

// routeClusters lists, per route of default/orders, the clusters it sends to.
func routeClusters(t *testing.T, c *xds.Cache) []string {
	t.Helper()
	b, _, ok := c.Get(xds.TypeRoute, xds.RouteName(orders))
	if !ok {
		return nil
	}
	var rc routev3.RouteConfiguration
	if err := proto.Unmarshal(b, &rc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rc.VirtualHosts[0].Routes {
		out = append(out, r.GetRoute().GetCluster())
	}
	return out
}

func hasCluster(c *xds.Cache, name string) bool {
	_, _, ok := c.Get(xds.TypeCluster, name)
	return ok
}

// registryWith is an in-memory registry holding the config objects of yaml.
func registryWith(t *testing.T, yaml string) *pushtest.Registry {
	t.Helper()
	objs, err := config.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	reg := pushtest.New(0)
	for _, o := range objs {
		reg.ApplyConfig(o)
	}
	return reg
}

func TestEmptySubsetIsNotRouted(t *testing.T) {
	reg := registryWith(t, ordersConfig)
	reg.Upsert(inst("b1", "blue"), inst("s2", "stable"))
	cp := startControlPlane(t, context.Background(), reg, nil)
	c := cp.cache
	blue, gray, stable, whole := "default/orders/blue", "default/orders/gray", "default/orders/stable", "default/orders"
	waitFor(t, func() bool { return slices.Equal(routeClusters(t, c), []string{blue, stable}) })
	if !hasCluster(c, blue) || !hasCluster(c, stable) || hasCluster(c, gray) || hasCluster(c, whole) {
		t.Fatalf("clusters %v: want blue and stable only (gray is empty, nothing routes to the whole service)", c.Names(xds.TypeCluster))
	}
	// The gray subset gets an instance: its cluster and route appear.
	reg.Upsert(inst("g3", "gray"))
	waitFor(t, func() bool {
		return slices.Equal(routeClusters(t, c), []string{blue, gray, stable}) && hasCluster(c, gray)
	})
	// The blue subset loses its only instance: its route and cluster go.
	reg.Delete(orders, "b1")
	waitFor(t, func() bool { return slices.Equal(routeClusters(t, c), []string{gray, stable}) && !hasCluster(c, blue) })
	// Without a VirtualService the default route goes to the whole service.
	vs, err := config.ParseKey("VirtualService/default/orders")
	if err != nil {
		t.Fatal(err)
	}
	reg.DeleteConfig(vs)
	waitFor(t, func() bool { return slices.Equal(routeClusters(t, c), []string{whole}) && hasCluster(c, whole) })
}

// compacting wraps a registry so that its stream reports ErrCompacted once.
type compacting struct {
	*pushtest.Registry
	once atomic.Bool
	hold chan struct{}
}

func (s *compacting) Follow(ctx context.Context, since int64) (push.Changes, error) {
	ch, err := s.Registry.Follow(ctx, since)
	return &compactingChanges{s: s, Changes: ch}, err
}

type compactingChanges struct {
	s *compacting
	push.Changes
}

func (c *compactingChanges) Next(ctx context.Context) ([]push.Change, error) {
	if c.s.once.CompareAndSwap(false, true) {
		<-c.s.hold // changes are committed meanwhile, then "lost"
		return nil, push.ErrCompacted
	}
	return c.Changes.Next(ctx)
}

func TestCompactedStartsAgainFromSnapshot(t *testing.T) {
	reg := pushtest.New(0)
	reg.Upsert(inst("s1", "stable"))
	src := &compacting{Registry: reg, hold: make(chan struct{})}
	cache := xds.NewCache()
	e := push.New(src, cache, push.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// The engine is past its snapshot and waiting in Next.
	waitFor(t, func() bool { return slices.Equal(routeClusters(t, cache), []string{"default/orders"}) })
	objs, _ := config.Decode([]byte(ordersConfig))
	for _, o := range objs {
		reg.ApplyConfig(o)
	}
	reg.Upsert(inst("b2", "blue"))
	close(src.hold)
	waitFor(t, func() bool {
		return slices.Equal(routeClusters(t, cache), []string{"default/orders/blue", "default/orders/stable"})
	})
}

// TestRunStopsDuringARound: a round that ctx ends stops before its next
// service, publishes nothing, and Run returns without waiting for the
// rest of the recomputation.
func TestRunStopsDuringARound(t *testing.T) {
	reg := pushtest.New(0)
	for _, svc := range []string{"a", "b", "c"} {
		reg.Upsert(&instance.Instance{ID: svc + "1", Namespace: "default", Service: svc, Host: "10.0.0.1", Port: 80, Weight: 1, Healthy: true})
	}
	cache := xds.NewCache()
	e := push.New(reg, cache, push.Options{})
	var builds atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	stuck := make(chan struct{}) // a build after ctx ended waits for it: the round would never end
	var unstick sync.Once
	defer unstick.Do(func() { close(stuck) })
	push.SetSlowBuild(e, func() {
		if builds.Add(1) == 1 {
			close(entered)
			<-release
			return
		}
		<-stuck
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	<-entered // the first round is building its first service
	cancel()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		unstick.Do(func() { close(stuck) })
		<-done
		t.Fatalf("Run waited for the round to build %d services after ctx ended", builds.Load())
	}
	if n := builds.Load(); n != 1 {
		t.Fatalf("%d services built, want 1", n)
	}
	if names := cache.Names(xds.TypeCluster); len(names) != 0 {
		t.Fatalf("clusters %v published after ctx ended", names)
	}
}
