package catalog

import (
	"testing"

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
