package gateway

import (
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func corsRoute(p proto.Message, optional bool) *route.RouteConfiguration {
	return filterRoute(func(r *route.Route) {
		a, _ := anypb.New(p)
		if optional {
			a, _ = anypb.New(&route.FilterConfig{Config: a, IsOptional: true})
		}
		r.TypedPerFilterConfig = map[string]*anypb.Any{corsFilterName: a}
	})
}

// TestCORSFilter: a preflight from an allowed origin (an exact "*" allows
// any) is answered with the allow headers; an actual request's answer
// gets Access-Control-Allow-Origin; other origins get nothing, and their
// preflights go on unless forward_not_matching_preflights is false.
func TestCORSFilter(t *testing.T) {
	policy := &corsv3.CorsPolicy{AllowOriginStringMatch: []*matcher.StringMatcher{
		{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: ".example"}}},
		AllowMethods: "GET", MaxAge: "60", ExposeHeaders: "x-e"}
	rc, err := decodeRouteConfig(corsRoute(policy, true))
	if err != nil {
		t.Fatal(err)
	}
	fc := rc.vhosts[0].routes[0].filters
	preflight := func(origin string) (*fasthttp.RequestCtx, bool) {
		ctx := new(fasthttp.RequestCtx)
		ctx.Request.Header.SetMethod("OPTIONS")
		ctx.Request.Header.Set("Origin", origin)
		ctx.Request.Header.Set("Access-Control-Request-Method", "GET")
		return ctx, fc.request(ctx, 0)
	}
	ctx, answered := preflight("https://a.example")
	if !answered || ctx.Response.StatusCode() != 200 || string(ctx.Response.Header.Peek("Access-Control-Allow-Origin")) != "https://a.example" ||
		string(ctx.Response.Header.Peek("Access-Control-Max-Age")) != "60" || string(ctx.Response.Header.Peek("Access-Control-Allow-Methods")) != "GET" {
		t.Fatalf("preflight: %v\n%s", answered, ctx.Response.Header.String())
	}
	if _, answered := preflight("https://a.other"); answered {
		t.Fatal("a preflight from another origin was answered (it is forwarded by default)")
	}
	var resp fasthttp.Response
	ctx.Request.Header.SetMethod("GET")
	fc.response(ctx, answerHeader(&resp.Header), 0)
	if string(resp.Header.Peek("Access-Control-Allow-Origin")) != "https://a.example" || string(resp.Header.Peek("Access-Control-Expose-Headers")) != "x-e" {
		t.Fatalf("actual: %s", resp.Header.String())
	}

	policy.AllowOriginStringMatch = []*matcher.StringMatcher{{MatchPattern: &matcher.StringMatcher_Exact{Exact: "*"}}}
	policy.ForwardNotMatchingPreflights = wrapperspb.Bool(false)
	if rc, err = decodeRouteConfig(corsRoute(policy, false)); err != nil {
		t.Fatal(err)
	}
	fc = rc.vhosts[0].routes[0].filters
	if ctx, answered := preflight("https://anything"); !answered || string(ctx.Response.Header.Peek("Access-Control-Allow-Origin")) != "https://anything" {
		t.Fatalf("*: %v %s", answered, ctx.Response.Header.String())
	}
	policy.FilterEnabled = &core.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{}}
	if rc, err = decodeRouteConfig(corsRoute(policy, false)); err != nil || rc.vhosts[0].routes[0].filters != nil {
		t.Fatalf("0%% enabled: %v %v", err, rc)
	}
}

// TestCORSRefused: a CORS config the gateway cannot read is refused by field.
func TestCORSRefused(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		p          proto.Message
	}{
		{"type", `typed_per_filter_config["envoy.filters.http.cors"]: type "type.googleapis.com/envoy.config.core.v3.HeaderValue"`, &core.HeaderValue{}},
		{"regex", `allow_origin_string_match[0].safe_regex.regex`, &corsv3.CorsPolicy{AllowOriginStringMatch: []*matcher.StringMatcher{
			{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "(?=a)"}}}}}},
		{"newline", `allow_headers: control characters`, &corsv3.CorsPolicy{AllowHeaders: "a\r\nb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeRouteConfig(corsRoute(tc.p, false))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// fuzzRewriteCORSSeeds are route configs with rewrites, a redirect keeping
// the request's port and a CORS policy (FuzzDecodeResources).
func fuzzRewriteCORSSeeds() []proto.Message {
	rw := rewriteRoute(func(ra *route.RouteAction) {
		ra.HostRewriteSpecifier = &route.RouteAction_HostRewriteLiteral{HostRewriteLiteral: "a.example"}
		ra.RegexRewrite = &matcher.RegexMatchAndSubstitute{Pattern: &matcher.RegexMatcher{Regex: `^/(\w+)`}, Substitution: `/x/\1`}
	})
	rd := filterRoute(func(r *route.Route) {
		r.Action = &route.Route_Redirect{Redirect: &route.RedirectAction{HostRedirect: "b.example", ResponseCode: route.RedirectAction_FOUND}}
		r.Metadata = &core.Metadata{FilterMetadata: nil}
	})
	cors := corsRoute(&corsv3.CorsPolicy{AllowOriginStringMatch: []*matcher.StringMatcher{{MatchPattern: &matcher.StringMatcher_Exact{Exact: "*"}}},
		AllowMethods: "GET", AllowCredentials: wrapperspb.Bool(true)}, true)
	return []proto.Message{rw, rd, cors}
}
