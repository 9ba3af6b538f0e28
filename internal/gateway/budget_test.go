package gateway

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

// A retry whose pick fails (the only endpoint was just ejected) returns its
// retry-budget permit; a leaked permit would shrink the budget for good.
func TestRetryPermitReturnedWhenRetryPickFails(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
	defer up.Close()
	host, port, _ := net.SplitHostPort(up.Listener.Addr().String())
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
		EndpointType: {"solo": &assignmentSpec{name: "solo", hosts: []hostSpec{{addr: net.JoinHostPort(host, port), weight: 1, healthy: true}}}},
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
		t.Fatalf("got %d, want 503 (the retry found no endpoint: the only one was ejected)", code)
	}
	if n := g.clusters["solo"].retries.Load(); n != 0 {
		t.Fatalf("%d retry permits still held after the call", n)
	}
}
