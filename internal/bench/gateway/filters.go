package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"

	gw "github.com/sextant-mesh/sextant/internal/gateway"
)

// FiltersProxy is the dataplane scenario's gateway of issue 43's header
// and CORS figure: the 10 routes of internal/gateway's
// BenchmarkProxyFilters, each with Istio's header changes and a CORS
// policy. With it in a run, every other gateway of the run serves the same
// 10 routes without them, and every proxy is sent filtersRequest.
const FiltersProxy = "sextant-filters"

// The request of every proxy in a run with FiltersProxy: a path of one of
// the 10 routes, from the origin their CORS policy allows (an actual
// request: the answer gets the allow headers).
const (
	filtersPath   = "/r3/items"
	filtersOrigin = "https://shop.example"
)

// routeSet is which routes a bench gateway serves.
type routeSet int

const (
	routesOne     routeSet = iota // one route, proxyConfig.prefix (or "/")
	routesPlain                   // /r0 .. /r9, no filters: the figure's "none"
	routesFilters                 // /r0 .. /r9 with header changes and CORS
)

func (pc proxyConfig) routeConfig() *route.RouteConfiguration {
	if pc.routes == routesOne {
		return benchRoutes(pc.timeout, pc.prefix)
	}
	return filterRoutes(pc.timeout, pc.routes == routesFilters)
}

// filterRoutes is BenchmarkProxyFilters' route configuration: 10 routes
// /r0 .. /r9 to the upstream, with filters two request headers set and
// added, one removed, one answer header set and a CORS policy allowing
// filtersOrigin on each.
func filterRoutes(timeout time.Duration, filters bool) *route.RouteConfiguration {
	var routes []*route.Route
	for i := range 10 {
		r := benchRoute(timeout, fmt.Sprintf("/r%d", i))
		if filters {
			r.RequestHeadersToAdd = []*core.HeaderValueOption{
				{Header: &core.HeaderValue{Key: "x-tenant", Value: "t1"}, AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
				{Header: &core.HeaderValue{Key: "x-route", Value: fmt.Sprint(i)}, AppendAction: core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
			}
			r.RequestHeadersToRemove = []string{"x-debug"}
			r.ResponseHeadersToAdd = []*core.HeaderValueOption{
				{Header: &core.HeaderValue{Key: "x-served-by", Value: "gw"}, AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			}
			cors, _ := anypb.New(&corsv3.CorsPolicy{AllowOriginStringMatch: []*matcher.StringMatcher{
				{MatchPattern: &matcher.StringMatcher_Exact{Exact: filtersOrigin}}},
				AllowMethods: "GET,POST", ExposeHeaders: "x-trace", MaxAge: "600"})
			r.TypedPerFilterConfig = map[string]*anypb.Any{"envoy.filters.http.cors": cors}
		}
		routes = append(routes, r)
	}
	return benchRouteConfig(routes...)
}

// checkFilterScenarios refuses the gRPC figures with FiltersProxy: their
// route has no filters, so the figure would compare nothing.
func checkFilterScenarios(scenarios []string) error {
	for _, s := range scenarios {
		if s == "grpc-unary" || s == "grpc-stream" {
			return fmt.Errorf("bench: %s measures the HTTP figures (h1, h1-tls, h2-tls, h2c), not %s", FiltersProxy, s)
		}
	}
	return nil
}

// checkFilters sends filtersRequest once to each proxy's HTTP/1.1 port and
// fails unless FiltersProxy's answer carries what its filters add and every
// other's does not: filters that did not run (or ran on the "none" side)
// would make the figure a comparison of nothing.
func checkFilters(proxies map[string]*dataplaneProxy, names []string) error {
	// No keep-alive: nothing of the check stays behind.
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, name := range names {
		req, err := http.NewRequest("GET", "http://"+proxies[name].h1+filtersPath, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Origin", filtersOrigin)
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("bench: %s: the filters check: %w", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("bench: %s: the filters check got %s (%s)", name, resp.Status, resp.Header.Get(gw.ErrorHeader))
		}
		served, allow := resp.Header.Values("X-Served-By"), resp.Header.Values("Access-Control-Allow-Origin")
		if want := name == FiltersProxy; want && !(slices.Equal(served, []string{"gw"}) && slices.Equal(allow, []string{filtersOrigin})) {
			return fmt.Errorf("bench: %s's filters did not run: GET %s from %s answered X-Served-By %q, Access-Control-Allow-Origin %q (want \"gw\", %q)",
				name, filtersPath, filtersOrigin, served, allow, filtersOrigin)
		} else if !want && (len(served) > 0 || len(allow) > 0) {
			return fmt.Errorf("bench: %s should run no filters, but answered X-Served-By %q, Access-Control-Allow-Origin %q", name, served, allow)
		}
	}
	return nil
}
