package gateway_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/locality"
)

// zoned is an assignment with one locality per group, zones[i] of region
// r1, at the priorities given (nil: all 0, the control plane's shared EDS).
func zoned(name string, prio []uint32, zones []string, groups ...[]ep) *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	for i, g := range groups {
		le := assignment(name, g...).Endpoints[0]
		le.Locality = &core.Locality{Region: "r1", Zone: zones[i]}
		if prio != nil {
			le.Priority = prio[i]
		}
		cla.Endpoints = append(cla.Endpoints, le)
	}
	return cla
}

// countCalls makes n calls and reports how many reached each upstream.
func countCalls(t *testing.T, g *gw, n int, ups ...*upstream) []int64 {
	t.Helper()
	before := make([]int64, len(ups))
	for i, u := range ups {
		before[i] = u.calls.Load()
	}
	for range n {
		if code, body, _ := g.get(t, "/"); code != 200 {
			t.Fatalf("call: %d %q", code, body)
		}
	}
	out := make([]int64, len(ups))
	for i, u := range ups {
		out[i] = u.calls.Load() - before[i]
	}
	return out
}

// EDS priorities: calls go to priority 0 while it is healthy enough, spill
// by Envoy's overprovisioning arithmetic when part of it is down, and all
// go to priority 1 when it is all down.
func TestEDSPriorities(t *testing.T) {
	a1, a2 := startUpstream(t, "a1", nil), startUpstream(t, "a2", nil)
	b1 := startUpstream(t, "b1", nil)
	cp := startControlPlane(t, "")
	routes := routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc")))
	set := func(ha, hb core.HealthStatus) {
		cp.set(rdsListener("gw", "r"), routes, edsCluster("svc"),
			zoned("svc", []uint32{0, 1}, []string{"a", "b"}, []ep{{u: a1}, {u: a2, healthy: ha}}, []ep{{u: b1, healthy: hb}}))
	}
	set(core.HealthStatus_HEALTHY, core.HealthStatus_HEALTHY)
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	if got := countCalls(t, g, 60, a1, a2, b1); got[2] != 0 {
		t.Fatalf("all healthy: calls %v, want none to priority 1", got)
	}
	// Half of priority 0 down: its health is min(100, 1.4*50) = 70%, so
	// 30% spill to priority 1.
	set(core.HealthStatus_UNHEALTHY, core.HealthStatus_HEALTHY)
	waitFor(t, "spill to priority 1", func() bool { return countCalls(t, g, 20, b1)[0] > 0 })
	got := countCalls(t, g, 400, a1, a2, b1)
	if got[1] != 0 {
		t.Fatalf("the unhealthy endpoint got calls: %v", got)
	}
	// 30% of 400 = 120; binomial sd ~9.2: 5 sd either side.
	if got[2] < 74 || got[2] > 166 {
		t.Fatalf("half of priority 0 down: priority 1 got %d of 400, want ~120 (30%%)", got[2])
	}
}

// The gateway in zone a of region r1 (--locality r1/a) prefers zone a's
// endpoints of an assignment without priorities, fails over to zone b when
// zone a's are all reported down (EDS health, no outlierDetection), and
// comes back when they are healthy again; and the same with the gateway's
// own active health check finding zone a down.
func TestLocalityFailover(t *testing.T) {
	a := startUpstream(t, "a", nil)
	b := startUpstream(t, "b", nil)
	cp := startControlPlane(t, "")
	routes := routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc")))
	set := func(ha core.HealthStatus, mods ...func(*cluster.Cluster)) {
		cp.set(rdsListener("gw", "r"), routes, edsCluster("svc", mods...),
			zoned("svc", nil, []string{"b", "a"}, []ep{{u: b}}, []ep{{u: a, healthy: ha}}))
	}
	set(core.HealthStatus_HEALTHY)
	// Zone b is listed first: the gateway's locality, not the order, decides.
	g := startGatewayWith(t, cp.addr, gateway.Options{Locality: locality.Locality{Region: "r1", Zone: "a"}})
	g.waitEndpoints(t, 1)
	if got := countCalls(t, g, 50, a, b); got[1] != 0 {
		t.Fatalf("healthy: calls %v to zones a, b; want all to zone a", got)
	}
	set(core.HealthStatus_UNHEALTHY)
	waitFor(t, "failover to the other zone", func() bool { return countCalls(t, g, 5, b)[0] == 5 })
	set(core.HealthStatus_HEALTHY)
	waitFor(t, "back to the own zone", func() bool { return countCalls(t, g, 5, a)[0] == 5 })

	// The gateway's own check: a's health endpoint starts failing.
	var down atomic.Bool
	a.set(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && down.Load() {
			w.WriteHeader(503)
			return
		}
		w.Write([]byte("a"))
	})
	set(core.HealthStatus_HEALTHY, func(c *cluster.Cluster) {
		c.HealthChecks = []*core.HealthCheck{httpCheck(50*time.Millisecond, 1, 1)}
	})
	waitFor(t, "own zone with the check on", func() bool { return countCalls(t, g, 5, a)[0] == 5 })
	down.Store(true)
	waitFor(t, "failover by the active check", func() bool { return countCalls(t, g, 5, b)[0] == 5 })
	down.Store(false)
	waitFor(t, "back by the active check", func() bool { return countCalls(t, g, 5, a)[0] == 5 })
}

// A cluster with locality_weighted_lb_config splits calls by the EDS
// localities' weights (what a DestinationRule's distribute publishes):
// 80/20 within binomial bounds; and by their healthy share: a locality
// with one of its two hosts down takes 1.4 x 50% = 70% of its weight.
func TestLocalityWeights(t *testing.T) {
	a1, a2, b := startUpstream(t, "a1", nil), startUpstream(t, "a2", nil), startUpstream(t, "b", nil)
	cp := startControlPlane(t, "")
	routes := routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc")))
	weighted := func(c *cluster.Cluster) {
		c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{LocalityConfigSpecifier: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
			LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{}}}
	}
	set := func(ha2 core.HealthStatus) {
		cla := zoned("svc", nil, []string{"a", "b"}, []ep{{u: a1}, {u: a2, healthy: ha2}}, []ep{{u: b}})
		cla.Endpoints[0].LoadBalancingWeight = wrapperspb.UInt32(80)
		cla.Endpoints[1].LoadBalancingWeight = wrapperspb.UInt32(20)
		cp.set(rdsListener("gw", "r"), routes, edsCluster("svc", weighted), cla)
	}
	set(core.HealthStatus_HEALTHY)
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	const n = 1000
	got := countCalls(t, g, n, a1, a2, b)
	// 80% of 1,000, sd 12.6: 5 sd either side.
	if a := got[0] + got[1]; a < 737 || a > 863 {
		t.Fatalf("80/20: zone a got %d of %d (%v)", a, n, got)
	}
	// a2 down: zone a's effective weight 80 x 0.7 = 56 against 20: 73.7%.
	set(core.HealthStatus_UNHEALTHY)
	waitFor(t, "a2 out", func() bool { return countCalls(t, g, 20, a2)[0] == 0 })
	got = countCalls(t, g, n, a1, a2, b)
	if got[1] != 0 || got[0] < 667 || got[0] > 807 {
		t.Fatalf("a2 down: zone a got %v of %d, want ~737", got, n)
	}
}
