package gateway

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

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
		req: headerOps{remove: []headerName{newHeaderName("x-debug")}, add: []headerOp{newHeaderOp("x-tenant", "t1", headerOverwrite),
			newHeaderOp("x-route", "r", headerAppend)}},
		resp: headerOps{add: []headerOp{newHeaderOp("x-served-by", "gw", headerOverwrite)}},
	}
	// An actual request from an allowed origin: the answer gets the
	// allow headers.
	cors := &corsFilter{origins: []headerMatch{{kind: strExact, value: "https://shop.example"}}, expose: []byte("x-trace"),
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
				r, cl, _, _, dest := g.routeCall(&ctx, tb, time.Time{}, scanRequestHead(&ctx.Request.Header))
				if cl == nil {
					b.Fatal("no cluster")
				}
				r.spec.filters.response(&ctx, answerHeader(&ctx.Response.Header), dest)
			}
		})
	}
}

// BenchmarkFilterHooks is the filter chain's own work on one call of
// BenchmarkProxyFilters' routes, in process: the request hooks on a
// request as the gateway's server parses it, the answer hooks on an
// upstream's answer as upstream.go reads it (names kept as sent). "none"
// is the restoring of both headers each call (the base to subtract);
// "headers" the route's header changes, "cors" its CORS policy on an
// actual request from the allowed origin, "both" the two as the benchmark
// routes have them.
func BenchmarkFilterHooks(b *testing.B) {
	var reqT fasthttp.RequestHeader
	if err := reqT.Read(bufio.NewReader(strings.NewReader("GET /r3/items HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n" +
		"User-Agent: fasthttp\r\nOrigin: https://shop.example\r\nX-Request-Id: 0f3c\r\n\r\n"))); err != nil {
		b.Fatal(err)
	}
	var respT fasthttp.ResponseHeader
	respT.DisableNormalizing()
	respT.SetNoDefaultContentType(true)
	if err := respT.Read(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nServer: fasthttp\r\n" +
		"Date: Sun, 29 Nov 2026 14:00:00 GMT\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 1024\r\n\r\n"))); err != nil {
		b.Fatal(err)
	}
	respT.Set("Via", viaValue)
	rc := &route.RouteConfiguration{Name: "r", VirtualHosts: []*route.VirtualHost{{Name: "v", Domains: []string{"*"},
		Routes: []*route.Route{{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/r3"}},
			Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "u"}}}}}}}}
	r := rc.VirtualHosts[0].Routes[0]
	headers := func(r *route.Route) {
		r.RequestHeadersToAdd = []*core.HeaderValueOption{
			{Header: &core.HeaderValue{Key: "x-tenant", Value: "t1"}, AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			{Header: &core.HeaderValue{Key: "x-route", Value: "3"}, AppendAction: core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
		}
		r.RequestHeadersToRemove = []string{"x-debug"}
		r.ResponseHeadersToAdd = []*core.HeaderValueOption{
			{Header: &core.HeaderValue{Key: "x-served-by", Value: "gw"}, AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		}
	}
	cors := func(r *route.Route) {
		a, _ := anypb.New(&corsv3.CorsPolicy{AllowOriginStringMatch: []*matcher.StringMatcher{
			{MatchPattern: &matcher.StringMatcher_Exact{Exact: "https://shop.example"}}},
			AllowMethods: "GET,POST", ExposeHeaders: "x-trace", MaxAge: "600"})
		r.TypedPerFilterConfig = map[string]*anypb.Any{corsFilterName: a}
	}
	for _, tc := range []struct {
		name string
		mods []func(*route.Route)
	}{{"none", nil}, {"headers", []func(*route.Route){headers}}, {"cors", []func(*route.Route){cors}},
		{"both", []func(*route.Route){headers, cors}}} {
		b.Run(tc.name, func(b *testing.B) {
			r := proto.Clone(r).(*route.Route)
			for _, m := range tc.mods {
				m(r)
			}
			fc, err := buildFilters(r, "r")
			if err != nil {
				b.Fatal(err)
			}
			var ctx fasthttp.RequestCtx
			ctx.Response.Header.DisableNormalizing()
			b.ReportAllocs()
			for b.Loop() {
				reqT.CopyTo(&ctx.Request.Header)
				respT.CopyTo(&ctx.Response.Header)
				if fc.request(&ctx, 0) {
					b.Fatal("answered")
				}
				fc.response(&ctx, answerHeader(&ctx.Response.Header), 0)
			}
			if tc.name == "both" && (string(ctx.Response.Header.Peek("Access-Control-Allow-Origin")) != "https://shop.example" ||
				string(ctx.Response.Header.Peek("x-served-by")) != "gw" || string(ctx.Request.Header.Peek("X-Tenant")) != "t1") {
				b.Fatalf("the filters did not run:\n%s\n%s", ctx.Request.Header.String(), ctx.Response.Header.String())
			}
		})
	}
}
