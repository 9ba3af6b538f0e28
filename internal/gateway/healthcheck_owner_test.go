package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

// TestHealthCheckGoroutinesOwned: a cluster's check goroutines stop when
// its check changes (a new checker takes over, warmed before the table
// swap) and when the cluster leaves.
func TestHealthCheckGoroutinesOwned(t *testing.T) {
	var probes atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { probes.Add(1) }))
	defer up.Close()
	hosts := []hostSpec{{addr: up.Listener.Addr().String(), weight: 1, healthy: true}}
	spec := func(interval time.Duration) *clusterSpec {
		return &clusterSpec{name: "c", service: "c", eds: "c", connect: time.Second,
			policy: policySpec{name: "round_robin", bias: 1, decay: time.Second}, budget: retryBudget{percent: 20, min: 3},
			hc: &healthCheckSpec{kind: hcHTTP, timeout: time.Second, interval: interval, unhealthyThreshold: 1, healthyThreshold: 1,
				noTraffic: interval, path: "/healthz", method: "GET", expected: [][2]int64{{200, 201}}}}
	}
	state := func(cs *clusterSpec) xdsclient.State {
		s := xdsclient.State{ListenerType: {"gw": &listenerSpec{name: "gw", inline: &routeConfigSpec{name: "rc"}}}}
		if cs != nil {
			s[ClusterType] = map[string]any{"c": cs}
			s[EndpointType] = map[string]any{"c": &assignmentSpec{name: "c", hosts: hosts}}
		}
		return s
	}
	g := New(Options{})
	defer g.pools.closeAll()
	if _, err := g.Update(state(spec(20 * time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	first := g.clusters["c"].hc
	// Warmed: the endpoint had its first check before Update returned.
	if h := first.snapshot(); len(h) != 1 || h[0].HealthFlags != "healthy" {
		t.Fatalf("after the first Update: %+v", h)
	}
	if _, err := g.Update(state(spec(30 * time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	second := g.clusters["c"].hc
	if second == first || first.ctx.Err() == nil {
		t.Fatal("a changed check kept its old checker running")
	}
	waitStopped(t, first)
	if h := second.snapshot(); len(h) != 1 || h[0].HealthFlags != "healthy" {
		t.Fatalf("after the change: %+v", h)
	}
	if _, err := g.Update(state(nil)); err != nil {
		t.Fatal(err)
	}
	// Every check goroutine has returned: none can probe again.
	waitStopped(t, second)
	if probes.Load() == 0 {
		t.Fatal("no probe reached the endpoint")
	}
	g.stopHealthChecks()
}

func waitStopped(t *testing.T, hc *healthChecker) {
	t.Helper()
	done := make(chan struct{})
	go func() { hc.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("check goroutines still running")
	}
}

// TestHealthCheckThresholds: Envoy's session rules, result by result.
func TestHealthCheckThresholds(t *testing.T) {
	spec := &clusterSpec{name: "c", policy: policySpec{name: "round_robin", bias: 1, decay: time.Second}}
	pol, err := newPolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClusterRT(spec, pol, newMetrics().cluster("c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.setHosts([]hostSpec{{addr: "10.0.0.1:80", weight: 1, healthy: true}}, &pools{}, newMetrics()); err != nil {
		t.Fatal(err)
	}
	hc := newHealthChecker(&healthCheckSpec{unhealthyThreshold: 3, healthyThreshold: 2}, c, nil, newMetrics())
	defer hc.stop()
	if _, err := hc.setEDS("10.0.0.1:80", true); err != nil {
		t.Fatal(err)
	}
	h := hc.hosts["10.0.0.1:80"]
	const pass, network, answer = 0, 1, 2
	step := func(r int, wantFailed bool) {
		t.Helper()
		hc.apply(h, r == pass, r == network, "")
		if h.failed != wantFailed {
			t.Fatalf("after result %d: failed=%v, want %v", r, h.failed, wantFailed)
		}
		if _, err := c.lb.Pick(nil); (err == nil) == wantFailed {
			t.Fatalf("after result %d: pick err %v with failed=%v", r, err, wantFailed)
		}
	}
	if !h.failed || !h.pending {
		t.Fatal("a new host is failed and pending")
	}
	step(pass, false)    // the first check bypasses healthy_threshold
	step(network, false) // 1 of 3
	step(network, false) // 2 of 3
	step(pass, false)    // resets the count
	step(network, false)
	step(network, false)
	step(network, true) // 3 in a row
	step(pass, true)    // 1 of 2
	step(pass, false)   // 2 of 2
	step(answer, true)  // an answer that is not healthy: at once
}
