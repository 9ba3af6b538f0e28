package kube

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// drainSyncer is a Syncer over informer stores the test fills itself (no
// API server: the informers never run) and a real registry.
func drainSyncer(t *testing.T) (*Syncer, cache.Store, *registry.Registry) {
	t.Helper()
	reg := openRegistry(t)
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	s := &Syncer{
		reg: reg, log: slog.New(slog.DiscardHandler),
		slices:  []cache.SharedIndexInformer{inf},
		nodes:   cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Node{}, 0, cache.Indexers{}),
		pending: map[string]struct{}{}, wake: make(chan struct{}, 1),
		byPod: map[string]map[string]struct{}{}, byNode: map[string]map[string]struct{}{}, refs: map[string]refs{},
		applied: map[string]map[string]*instance.Instance{}, from: map[string]string{},
		ready: make(chan struct{}),
	}
	return s, inf.GetStore(), reg
}

func hosts(reg *registry.Registry, key naming.ServiceKey) map[string]bool {
	out := map[string]bool{}
	if g := reg.Instances().Lookup(key); g != nil {
		for _, in := range g.Items() {
			out[in.Host] = true
		}
	}
	return out
}

// TestDrainBatches: slices changed together are one registry write, with
// the result of writing them one by one: an address that moves between
// two slices of the batch stays, whichever slice sorts first; a slice the
// registry refuses (an address another writer owns) is retried alone and
// does not hold back the others.
func TestDrainBatches(t *testing.T) {
	s, store, reg := drainSyncer(t)
	ctx := context.Background()
	key := naming.ServiceKey{Namespace: "batch", Name: "api"}
	ep := func(addr string) discoveryv1.Endpoint { return endpoint(addr, "", true, true, false) }
	set := func(name string, addrs ...string) {
		var eps []discoveryv1.Endpoint
		for _, a := range addrs {
			eps = append(eps, ep(a))
		}
		if err := store.Update(slice("batch", name, "api", eps...)); err != nil {
			t.Fatal(err)
		}
		s.queue("batch/" + name)
	}
	check := func(step string, commits, writes int64, want ...string) {
		t.Helper()
		got := hosts(reg, key)
		if len(got) != len(want) {
			t.Errorf("%s: hosts %v, want %v", step, got, want)
		}
		for _, w := range want {
			if !got[w] {
				t.Errorf("%s: %s missing from %v", step, w, got)
			}
		}
		if s.Commits() != commits || s.Writes() != writes {
			t.Errorf("%s: %d commits, %d slice writes; want %d, %d", step, s.Commits(), s.Writes(), commits, writes)
		}
	}

	set("a", "10.0.0.1", "10.0.0.2")
	set("b", "10.0.0.3")
	s.drain(ctx)
	check("two new slices", 1, 2, "10.0.0.1", "10.0.0.2", "10.0.0.3")

	// a sorts first: it gives 10.0.0.2 up (a delete) before b takes it.
	set("a", "10.0.0.1")
	set("b", "10.0.0.2", "10.0.0.3")
	s.drain(ctx)
	check("moved from the first slice to the second", 2, 4, "10.0.0.1", "10.0.0.2", "10.0.0.3")

	// a takes 10.0.0.3 before b gives it up: b must not delete it, and
	// then has nothing to write (as written alone after a).
	set("a", "10.0.0.1", "10.0.0.3")
	set("b", "10.0.0.2")
	s.drain(ctx)
	check("moved from the second slice to the first", 3, 5, "10.0.0.1", "10.0.0.2", "10.0.0.3")
	if got := s.from["k8s-"+instance.DefaultID("batch", "api", "10.0.0.3", 8080)]; got != "batch/a" {
		t.Errorf("10.0.0.3 is from %q, want batch/a", got)
	}

	// An address someone else registered: its slice is refused, the
	// other slice of the batch is written.
	id := "k8s-" + instance.DefaultID("batch", "api", "10.0.0.9", 8080)
	if _, err := reg.Register(ctx, []*instance.Instance{{ID: id, Namespace: "batch", Service: "api", Host: "10.0.0.9", Port: 8080}}); err != nil {
		t.Fatal(err)
	}
	set("c", "10.0.0.9")
	set("d", "10.0.0.4")
	dctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.drain(dctx) })
	waitFor(t, reg, key, "slice d despite slice c refused", func(g *registry.Service) bool {
		_, ok := g.Get("k8s-" + instance.DefaultID("batch", "api", "10.0.0.4", 8080))
		return ok
	})
	stop()
	wg.Wait()
	if _, ok := s.applied["batch/c"]; ok {
		t.Error("refused slice c recorded as written")
	}
	s.mu.Lock()
	_, again := s.pending["batch/c"]
	s.mu.Unlock()
	if !again {
		t.Error("refused slice c not queued again")
	}
}
