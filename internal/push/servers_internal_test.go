package push

import (
	"net/netip"
	"testing"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// TestServersWatchWhileResolving: an instance change seen while the config
// goroutine resolves the server listeners (after it read the registry,
// before it recorded the services found) is watched, so that it queues
// another resolution rather than being lost.
func TestServersWatchWhileResolving(t *testing.T) {
	var s servers
	orders := naming.ServiceKey{Namespace: "default", Name: "orders"}
	s.add("l", serverReq{addr: netip.MustParseAddrPort("10.0.0.7:8080")})
	reqs, _ := s.all()
	if !s.watches(orders) {
		t.Fatal("a change during the resolution is not watched")
	}
	s.resolved(map[string]workload{"l": {svc: orders}})
	if len(reqs) != 1 || !s.watches(orders) {
		t.Fatalf("%d requests; watches orders after the resolution: %v", len(reqs), s.watches(orders))
	}
	if billing := (naming.ServiceKey{Namespace: "default", Name: "billing"}); s.watches(billing) {
		t.Fatal("resolved: a change of another service is watched")
	}
}
