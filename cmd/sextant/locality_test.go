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

// A DestinationRule's localityLbSetting.distribute through the server and
// a gateway in zone a: 80% of zone a's calls stay in zone a, 20% go to
// zone b, within binomial bounds over 1,000 calls.
func TestMeshLocalityDistribute(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, _, _ := startMeshWith(t, "", 10*time.Second, func(f *gatewayFlags, _ string) { f.locality = "r1/a" })
	if _, err := api.ApplyConfig(ctx, []byte(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        distribute: [{from: "r1/a/*", to: {"r1/a/*": 80, "r1/b/*": 20}}]
`), false); err != nil {
		t.Fatal(err)
	}
	for _, zone := range []string{"a", "b"} {
		u := startUpstream(t, zone)
		if _, err := api.Register(ctx, client.Instance{ID: "orders-" + zone, Service: "orders", Host: "127.0.0.1", Port: u.addr.Port,
			Metadata: map[string]string{"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": zone}}); err != nil {
			t.Fatal(err)
		}
	}
	// Both zones answer (the weights and both endpoints have arrived).
	waitTrue(t, 20*time.Second, func() bool { got := tally(t, proxy, 20, nil); return got["a"] > 0 && got["b"] > 0 })
	const n = 1000
	got := tally(t, proxy, n, nil)
	// 80% of 1,000, sd 12.6: 5 sd either side.
	if got["a"] < 737 || got["a"] > 863 || got["a"]+got["b"] != n {
		t.Fatalf("distribute 80/20: %v of %d", got, n)
	}
}
