package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// failoverPriorityDR orders orders' endpoints by region first, then by
// the tier label, as Istio's failoverPriority.
const failoverPriorityDR = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        failoverPriority: [topology.kubernetes.io/region, tier]
`

// TestMeshFailoverPriority: a DestinationRule's failoverPriority through
// the server and a gateway in r1/a with label tier=gold (--labels): the
// gold instance of zone b (region and tier match: priority 0) is preferred
// to the silver one of the gateway's own zone a (region only: 1), and that
// to the gold one of region r2 (the region differs: 2), whatever the
// zones; when zone b's instance fails its health check calls go to zone a,
// when that fails too to r2, and they come back as each passes again.
func TestMeshFailoverPriority(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, _, _ := startMeshWith(t, "", 10*time.Second, func(f *gatewayFlags, _ string) {
		f.locality = "r1/a"
		f.labels = map[string]string{"tier": "gold"}
	})
	where := map[string][2]string{"a": {"r1", "silver"}, "b": {"r1", "gold"}, "c": {"r2", "gold"}}
	zones := map[string]*upstream{}
	for zone, w := range where {
		u := startUpstream(t, zone)
		zones[zone] = u
		if _, err := api.Register(ctx, client.Instance{ID: "orders-" + zone, Service: "orders", Host: "127.0.0.1", Port: u.addr.Port,
			Metadata: map[string]string{"topology.kubernetes.io/region": w[0], "topology.kubernetes.io/zone": zone, "tier": w[1]},
			Checks: []client.Check{{Type: "http", Target: fmt.Sprintf("http://%s/health", u.addr), Interval: client.Duration(time.Second),
				FailuresBeforeCritical: 1, Status: "passing"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.ApplyConfig(ctx, []byte(failoverPriorityDR), false); err != nil {
		t.Fatal(err)
	}
	all := func(want string, n int) bool {
		for range n {
			if name, _ := get(t, proxy, "orders", "/", nil); name != want {
				return false
			}
		}
		return true
	}
	waitTrue(t, 20*time.Second, func() bool { return all("b", 10) })
	if got := tally(t, proxy, 40, nil); got["b"] != 40 {
		t.Fatalf("all healthy: 40 calls reached %v, want all the gold instance (zone b)", got)
	}
	zones["b"].fail.Store(true)
	waitTrue(t, 20*time.Second, func() bool { return all("a", 10) })
	zones["a"].fail.Store(true)
	waitTrue(t, 20*time.Second, func() bool { return all("c", 10) })
	zones["a"].fail.Store(false)
	waitTrue(t, 20*time.Second, func() bool { return all("a", 10) })
	zones["b"].fail.Store(false)
	waitTrue(t, 20*time.Second, func() bool { return all("b", 10) })
	if got := tally(t, proxy, 40, nil); got["b"] != 40 {
		t.Fatalf("healthy again: 40 calls reached %v, want all zone b", got)
	}
}
