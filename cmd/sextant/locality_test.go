package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// Istio's locality failover task through the server and a gateway started
// with --locality r1/a: orders has an instance in zone a and one in zone b
// (Kubernetes' topology labels); calls go to zone a; when zone a's
// instance fails its health check (the server's, no DestinationRule and
// no outlierDetection at all), calls go to zone b; when it passes again,
// they come back.
func TestMeshLocalityFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, _, _ := startMeshWith(t, "", 10*time.Second, func(f *gatewayFlags, _ string) { f.locality = "r1/a" })
	zones := map[string]*upstream{"a": startUpstream(t, "a"), "b": startUpstream(t, "b")}
	for zone, u := range zones {
		if _, err := api.Register(ctx, client.Instance{ID: "orders-" + zone, Service: "orders", Host: "127.0.0.1", Port: u.addr.Port,
			Metadata: map[string]string{"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": zone},
			Checks: []client.Check{{Type: "http", Target: fmt.Sprintf("http://%s/health", u.addr), Interval: client.Duration(time.Second),
				FailuresBeforeCritical: 1, Status: "passing"}}}); err != nil {
			t.Fatal(err)
		}
	}
	// all reports whether n calls in a row were all answered by want.
	all := func(want string, n int) bool {
		for range n {
			if name, _ := get(t, proxy, "orders", "/", nil); name != want {
				return false
			}
		}
		return true
	}
	waitTrue(t, 20*time.Second, func() bool { return all("a", 1) })
	if got := tally(t, proxy, 40, nil); got["a"] != 40 {
		t.Fatalf("zone a healthy: 40 calls reached %v, want all zone a", got)
	}
	zones["a"].fail.Store(true)
	waitTrue(t, 20*time.Second, func() bool { return all("b", 10) })
	zones["a"].fail.Store(false)
	waitTrue(t, 20*time.Second, func() bool { return all("a", 10) })
	if got := tally(t, proxy, 40, nil); got["a"] != 40 {
		t.Fatalf("zone a healthy again: 40 calls reached %v, want all zone a", got)
	}
}
