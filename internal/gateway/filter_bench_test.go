package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/label"
)

// BenchmarkRouteCall is the gateway's per-call routing work in process
// (route, pick the target, run the route's filter chain, the answer's
// filter hook), without sockets: "none" is a route without filters (the
// path every existing route takes), "headers" one with three header
// changes on the request and one on the answer, "cors" a CORS policy on
// an actual request from an allowed origin.
func BenchmarkRouteCall(b *testing.B) {
	spec := &clusterSpec{name: "svc", service: "svc", policy: policySpec{name: "round_robin"}, connect: time.Second}
	pol, err := newPolicy(spec)
	if err != nil {
		b.Fatal(err)
	}
	ms := newMetrics()
	c, err := newClusterRT(spec, pol, ms.cluster("svc"))
	if err != nil {
		b.Fatal(err)
	}
	var hosts []hostSpec
	for i := range 10 {
		hosts = append(hosts, hostSpec{addr: fmt.Sprintf("10.0.0.%d:80", i), weight: 1, healthy: true, labels: label.FromMap(nil)})
	}
	var p pools
	defer p.closeAll()
	if err := c.setHosts(hosts, &p, ms); err != nil {
		b.Fatal(err)
	}
	headers := &headersFilter{
		req: headerOps{remove: []string{"x-debug"}, add: []headerOp{{name: "x-tenant", value: "t1", action: headerOverwrite},
			{name: "x-route", value: "r", action: headerAppend}}},
		resp: headerOps{add: []headerOp{{name: "x-served-by", value: "gw", action: headerOverwrite}}},
	}
	// An actual request from an allowed origin: the answer gets the
	// allow headers.
	cors := &corsFilter{origins: []headerMatch{{kind: strExact, value: "https://shop.example"}}, expose: "x-trace",
		credentials: true, forwardUnmatched: true}
	for _, tc := range []struct {
		name    string
		filters filterChain
	}{{"none", nil}, {"headers", filterChain{headers}}, {"cors", filterChain{cors}}} {
		origin := tc.name == "cors"
		b.Run(tc.name, func(b *testing.B) {
			rc := &routeConfigSpec{name: "r", vhosts: []*vhostSpec{{name: "v", domains: []string{"*"}, routes: []*routeSpec{{
				match: matchSpec{kind: matchPrefix, value: "/"}, clusters: []clusterWeight{{name: "svc", weight: 1}},
				filters: tc.filters}}}}}
			tb := newTable(rc, map[string]*clusterRT{"svc": c})
			g := &Gateway{}
			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				ctx.Request.Header.Reset()
				ctx.Response.Header.Reset()
				ctx.Request.Header.SetRequestURI("/items")
				ctx.Request.Header.SetHost("svc.example.com")
				if origin {
					ctx.Request.Header.Set("Origin", "https://shop.example")
				}
				r, cl, _, _, dest := g.routeCall(&ctx, tb)
				if cl == nil {
					b.Fatal("no cluster")
				}
				r.spec.filters.response(&ctx, fastHeader{&ctx.Response.Header}, dest)
			}
		})
	}
}
