package gateway_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previouspriorities "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/locality"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
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

// retryVS is a VirtualService for orders whose routes retry on 5xx: /remote/
// twice with retryRemoteLocalities, /once/ once with it, /local/ twice
// without it.
const retryVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - match: [{uri: {prefix: /remote/}}]
    retries: {attempts: 2, retryOn: 5xx, retryRemoteLocalities: true}
    route: [{destination: {host: orders}}]
  - match: [{uri: {prefix: /once/}}]
    retries: {attempts: 1, retryOn: 5xx, retryRemoteLocalities: true}
    route: [{destination: {host: orders}}]
  - match: [{uri: {prefix: /local/}}]
    retries: {attempts: 2, retryOn: 5xx}
    route: [{destination: {host: orders}}]
`

// TestRetryRemoteLocalities: the gateway in zone a, the only endpoint of
// zone a answering 503 and zone b's answering 200, routes as the control
// plane publishes them from a VirtualService. With retryRemoteLocalities
// (Envoy's previous_priorities retry priority, Istio's update_frequency
// 2) the first retry keeps the unmodified load (zone a) and the second
// leaves zone a out: the call gets zone b's 200. With one retry it never
// leaves zone a, as with Envoy; without the flag every attempt stays in
// zone a and the call fails. A control plane's update_frequency 1 sends
// the first retry to zone b.
func TestRetryRemoteLocalities(t *testing.T) {
	a := startUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	b := startUpstream(t, "b", nil)
	objs, err := config.Decode([]byte(retryVS))
	if err != nil {
		t.Fatal(err)
	}
	vh := xds.VirtualHost("orders", []string{"*"}, naming.ServiceKey{Namespace: "default", Name: "orders"}, objs[0],
		func(config.Destination) (string, bool) { return "svc", true }, nil)
	freq1, err := anypb.New(&previouspriorities.PreviousPrioritiesConfig{UpdateFrequency: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := prefixRoute("/first/", "svc")
	first.GetRoute().RetryPolicy = &route.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(1),
		RetryPriority: &route.RetryPolicy_RetryPriority{Name: xds.PreviousPriorities,
			ConfigType: &route.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: freq1}}}
	vh.Routes = append([]*route.Route{first}, vh.Routes...)
	cp := startControlPlane(t, "")
	// Zone b is listed first: the gateway's locality, not the order, decides.
	cp.set(rdsListener("gw", "r"), xds.RouteConfiguration("r", vh), edsCluster("svc"),
		zoned("svc", nil, []string{"b", "a"}, []ep{{u: b}}, []ep{{u: a}}))
	g := startGatewayWith(t, cp.addr, gateway.Options{Locality: locality.Locality{Region: "r1", Zone: "a"}})
	g.waitEndpoints(t, 1)
	for _, tc := range []struct {
		path         string
		code         int
		toA, toB     int64 // attempts per call in zone a, zone b
		upstreamBody string
	}{
		{"/remote/x", 200, 2, 1, "upstream=b"},
		{"/once/x", 503, 2, 0, ""},
		{"/local/x", 503, 3, 0, ""},
		{"/first/x", 200, 1, 1, "upstream=b"},
	} {
		const n = 10
		a0, b0 := a.calls.Load(), b.calls.Load()
		for range n {
			code, body, _ := g.get(t, tc.path)
			if code != tc.code || !strings.Contains(body, tc.upstreamBody) {
				t.Fatalf("%s: %d %q, want %d %q", tc.path, code, body, tc.code, tc.upstreamBody)
			}
		}
		if da, db := a.calls.Load()-a0, b.calls.Load()-b0; da != n*tc.toA || db != n*tc.toB {
			t.Fatalf("%s: %d calls reached zone a, %d zone b; want %d and %d", tc.path, da, db, n*tc.toA, n*tc.toB)
		}
	}
}
