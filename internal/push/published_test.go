package push_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// gate holds the engine's work that passes it while closed, until opened
// (once, for good).
type gate struct {
	closed  atomic.Bool
	release chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

func (g *gate) close() { g.closed.Store(true) }

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (g *gate) pass() {
	if g.closed.Load() {
		<-g.release
	}
}

// TestWaitPublished: WaitPublished returns once the config a revision
// wrote is in the cache, not before: held while the config round is held,
// and the routes are there the moment it returns (no polling).
func TestWaitPublished(t *testing.T) {
	reg := pushtest.New(0)
	reg.Upsert(inst("b1", "blue"), inst("s2", "stable"))
	g := newGate()
	cp := startControlPlane(t, context.Background(), reg, func(e *push.Engine) { push.SetSlowConfig(e, g.pass) })
	t.Cleanup(g.open) // runs before the control plane's: a failure must not leave the round held
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cp.engine.WaitPublished(ctx, reg.Revision()); err != nil {
		t.Fatal(err)
	}
	if got := routeClusters(t, cp.cache); !slices.Equal(got, []string{"default/orders"}) {
		t.Fatalf("routes before the config: %v", got)
	}
	objs, err := config.Decode([]byte(ordersConfig))
	if err != nil {
		t.Fatal(err)
	}
	g.close()
	var rev int64
	for _, o := range objs {
		rev = reg.ApplyConfig(o)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	err = cp.engine.WaitPublished(short, rev)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitPublished while the round is held: %v, want a deadline error", err)
	}
	g.open()
	if err := cp.engine.WaitPublished(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if got := routeClusters(t, cp.cache); !slices.Equal(got, []string{"default/orders/blue", "default/orders/stable"}) {
		t.Fatalf("routes when WaitPublished returned: %v", got)
	}
}

// TestWaitPublishedEndpoints: the endpoint sets of the clusters an apply
// creates (a DestinationRule's subsets) are in the cache when
// WaitPublished returns, so a client asking for them right after gets
// them, not "resource does not exist".
func TestWaitPublishedEndpoints(t *testing.T) {
	reg := pushtest.New(0)
	reg.Upsert(inst("b1", "blue"), inst("s2", "stable"))
	g := newGate()
	cp := startControlPlane(t, context.Background(), reg, func(e *push.Engine) { push.SetSlowEndpoints(e, g.pass) })
	t.Cleanup(g.open) // runs before the control plane's: a failure must not leave the worker held
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cp.engine.WaitPublished(ctx, reg.Revision()); err != nil {
		t.Fatal(err)
	}
	objs, err := config.Decode([]byte(ordersConfig))
	if err != nil {
		t.Fatal(err)
	}
	g.close()
	var rev int64
	for _, o := range objs {
		rev = reg.ApplyConfig(o)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	err = cp.engine.WaitPublished(short, rev)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitPublished while the subsets' endpoints are held: %v, want a deadline error", err)
	}
	g.open()
	if err := cp.engine.WaitPublished(ctx, rev); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"default/orders/blue", "default/orders/stable"} {
		if _, _, ok := cp.cache.Get(xds.TypeEndpoint, name); !ok {
			t.Errorf("endpoints of %s not published when WaitPublished returned", name)
		}
	}
}
