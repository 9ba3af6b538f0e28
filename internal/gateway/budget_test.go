package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

// A retry whose pick fails (both endpoints were just ejected; a lone
// endpoint is never ejected out of its set) returns its retry-budget
// permit; a leaked permit would shrink the budget for good.
func TestRetryPermitReturnedWhenRetryPickFails(t *testing.T) {
	var hosts []hostSpec
	for range 2 {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
		defer up.Close()
		hosts = append(hosts, hostSpec{addr: up.Listener.Addr().String(), weight: 1, healthy: true})
	}
	rs := &routeSpec{name: "r", match: matchSpec{kind: matchPrefix, value: "/"}, timeout: 5 * time.Second,
		clusters: []clusterWeight{{name: "solo", weight: 1}},
		retry:    retrySpec{defined: true, on: retry5xx, num: 3}}
	cs := &clusterSpec{name: "solo", service: "solo", eds: "solo", connect: time.Second,
		policy: policySpec{name: "round_robin", bias: 1, decay: time.Second},
		eject:  &balancer.EjectionConfig{ConsecutiveFailures: 1, BaseEjection: time.Minute, MaxEjectedPercent: 100},
		budget: retryBudget{percent: 0, min: 1}}
	g := New(Options{})
	defer g.pools.closeAll()
	_, err := g.Update(xdsclient.State{
		ListenerType: {"gw": &listenerSpec{name: "gw", inline: &routeConfigSpec{name: "rc",
			vhosts: []*vhostSpec{{name: "all", domains: []string{"*"}, routes: []*routeSpec{rs}}}}}},
		ClusterType:  {"solo": cs},
		EndpointType: {"solo": &assignmentSpec{name: "solo", hosts: hosts}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("/x")
	req.Header.SetHost("a")
	ctx.Init(req, nil, nil)
	g.serve(&ctx)
	if code := ctx.Response.StatusCode(); code != 503 {
		t.Fatalf("got %d, want 503 (the second retry found no endpoint: both were ejected)", code)
	}
	if n := g.clusters["solo"].retries.Load(); n != 0 {
		t.Fatalf("%d retry permits still held after the call", n)
	}
}
