package catalog

import (
	"context"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// TestLoadKeepsGroupRevisions: a loaded group's revision is its last
// stored change (its items' highest revision), not the loaded revision,
// unless the load itself changed one of its items (Codec.Loaded), which a
// watcher must then see.
func TestLoadKeepsGroupRevisions(t *testing.T) {
	c := newCatalog(Options{})
	mk := func(id, svc string, rev int64, healthy bool) *instance.Instance {
		return &instance.Instance{ID: id, Namespace: "default", Service: svc, Host: "h", Port: 1, Revision: rev, Healthy: healthy}
	}
	loadInstances(c, 40, []*instance.Instance{
		mk("a1", "a", 3, true), mk("a2", "a", 17, true), mk("a3", "a", 9, true),
		mk("b1", "b", 5, true),
		mk("c1", "c", 2, true), mk("c2", "c", 6, false), // made healthy by the load
	})
	tab := c.instancesTable()
	for name, want := range map[string]int64{"a": 17, "b": 5, "c": 40} {
		g := tab.Lookup(naming.ServiceKey{Namespace: "default", Name: name})
		if g == nil || g.Revision != want {
			t.Errorf("group %s: %+v, want revision %d", name, g, want)
		}
	}
	if got := tab.Snapshot().Revision(); got != 40 {
		t.Errorf("table revision %d, want 40", got)
	}
}

// TestReloadComparesWithTheReplacedVersion: a reload of a running table
// (a follower past the store's history) keeps the revision of a group
// that did not change, and gives the loaded revision to one that lost an
// item or all of them meanwhile (removals leave no record), so that its
// watchers wake.
func TestReloadComparesWithTheReplacedVersion(t *testing.T) {
	c := newCatalog(Options{})
	mk := func(id, svc string, rev int64) *instance.Instance {
		return &instance.Instance{ID: id, Namespace: "default", Service: svc, Host: "h", Port: 1, Revision: rev, Healthy: true}
	}
	loadInstances(c, 20, []*instance.Instance{
		mk("a1", "a", 3), mk("b1", "b", 5), mk("b2", "b", 12), mk("c1", "c", 7),
	})
	tab := c.instancesTable()
	key := func(n string) naming.ServiceKey { return naming.ServiceKey{Namespace: "default", Name: n} }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	woke := make(chan *Group[*instance.Instance], 1)
	go func() { woke <- tab.Wait(ctx, key("b"), 12) }()
	// Meanwhile b2 was removed (at 30), c emptied, d created.
	loadInstances(c, 40, []*instance.Instance{mk("a1", "a", 3), mk("b1", "b", 5), mk("d1", "d", 33)})
	c.waiters.notifyAll()
	for name, want := range map[string]int64{"a": 3, "b": 40, "c": 40, "d": 33} {
		if g := tab.Lookup(key(name)); g == nil || g.Revision != want {
			t.Errorf("group %s after the reload: %+v, want revision %d", name, g, want)
		}
	}
	if g := tab.Lookup(key("c")); g == nil || g.Len() != 0 {
		t.Errorf("group c: %+v, want emptied", g)
	}
	select {
	case g := <-woke:
		if g == nil || g.Len() != 1 {
			t.Errorf("b's watcher woke with %+v, want b1 alone", g)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b's watcher did not wake on the reload that removed b2")
	}
}
