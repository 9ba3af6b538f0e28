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
