package gateway

import (
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestRouteMatchPseudoHeaders: a route's header matchers on :method,
// :authority, :scheme and :path read the request's method, Host, scheme
// (https over TLS) and path with query, as Envoy reads them from any
// request; an inverted present matcher needs the header absent; another
// pseudo-header is refused.
func TestRouteMatchPseudoHeaders(t *testing.T) {
	exact := func(name, v string, invert bool) *route.HeaderMatcher {
		return &route.HeaderMatcher{Name: name, InvertMatch: invert, HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{
			StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: v}}}}
	}
	rc, err := decodeRouteConfig(filterRoute(func(r *route.Route) {
		r.Match.PathSpecifier = &route.RouteMatch_Prefix{Prefix: "/API"}
		r.Match.CaseSensitive = wrapperspb.Bool(false)
		r.Match.Headers = []*route.HeaderMatcher{
			exact(":method", "POST", false),
			exact(":authority", "orders.example.com", false),
			exact(":scheme", "https", false),
			{Name: "x-canary", InvertMatch: true, HeaderMatchSpecifier: &route.HeaderMatcher_PresentMatch{PresentMatch: true}},
		}
		r.Match.QueryParameters = []*route.QueryParameterMatcher{{Name: "v", QueryParameterMatchSpecifier: &route.QueryParameterMatcher_StringMatch{
			StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "2"}}}}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	m := &rc.vhosts[0].routes[0].match
	for _, tc := range []struct {
		name   string
		method string
		host   string
		uri    string
		tls    bool
		canary bool
		want   bool
	}{
		{"all match", "POST", "orders.example.com", "/api/items?v=2", true, false, true},
		{"path in another case", "POST", "orders.example.com", "/Api/items?v=2", true, false, true},
		{"plaintext", "POST", "orders.example.com", "/api/items?v=2", false, false, false},
		{"GET", "GET", "orders.example.com", "/api/items?v=2", true, false, false},
		{"another authority", "POST", "other.example.com", "/api/items?v=2", true, false, false},
		{"canary header present", "POST", "orders.example.com", "/api/items?v=2", true, true, false},
		{"query differs", "POST", "orders.example.com", "/api/items?v=3", true, false, false},
	} {
		var h fasthttp.RequestHeader
		h.SetMethod(tc.method)
		h.SetHost(tc.host)
		h.SetRequestURI(tc.uri)
		if tc.canary {
			h.Set("X-Canary", "1")
		}
		path, _, _ := strings.Cut(tc.uri, "?")
		if got := m.matches([]byte(path), &h, tc.tls); got != tc.want {
			t.Errorf("%s: matches %v, want %v", tc.name, got, tc.want)
		}
	}
	path := exact(":path", "/x?y=1", false)
	rc, err = decodeRouteConfig(filterRoute(func(r *route.Route) { r.Match.Headers = []*route.HeaderMatcher{path} }))
	if err != nil {
		t.Fatal(err)
	}
	var h fasthttp.RequestHeader
	h.SetRequestURI("/x?y=1")
	if !rc.vhosts[0].routes[0].match.matches([]byte("/x"), &h, false) {
		t.Error(":path: the path with its query does not match")
	}
	_, err = decodeRouteConfig(filterRoute(func(r *route.Route) { r.Match.Headers = []*route.HeaderMatcher{exact(":status", "200", false)} }))
	if err == nil || !strings.Contains(err.Error(), `pseudo-header ":status"`) {
		t.Fatalf(":status: got %v", err)
	}
}
