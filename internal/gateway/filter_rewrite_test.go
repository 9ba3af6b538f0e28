package gateway

import (
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func rewriteRoute(mod func(ra *route.RouteAction)) *route.RouteConfiguration {
	return filterRoute(func(r *route.Route) { mod(r.GetRoute()) })
}

// TestRewriteFilter: host_rewrite_literal replaces the Host, regex_rewrite
// rewrites the path (every match, Envoy's \1 groups, a $ kept literal)
// and leaves the query alone.
func TestRewriteFilter(t *testing.T) {
	rc, err := decodeRouteConfig(rewriteRoute(func(ra *route.RouteAction) {
		ra.HostRewriteSpecifier = &route.RouteAction_HostRewriteLiteral{HostRewriteLiteral: "ratings.internal:9080"}
		ra.RegexRewrite = &matcher.RegexMatchAndSubstitute{Pattern: &matcher.RegexMatcher{Regex: `^/svc/([^/]+)(/.*)$`},
			Substitution: `\2/of/\1$`}
	}))
	if err != nil {
		t.Fatal(err)
	}
	fc := rc.vhosts[0].routes[0].filters
	if len(fc) != 1 {
		t.Fatalf("chain %v, want the rewrite filter", fc)
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/svc/ratings/a/b?x=/svc/y")
	ctx.Request.Header.SetHost("gw.example")
	ctx.Request.URI() // parsed before, as the call log and query matches do
	if fc.request(&ctx, 0) {
		t.Fatal("the rewrite answered the call")
	}
	if got := string(ctx.Request.Header.RequestURI()); got != "/a/b/of/ratings$?x=/svc/y" {
		t.Fatalf("path %q", got)
	}
	if got := string(ctx.Request.Header.Host()); got != "ratings.internal:9080" {
		t.Fatalf("host %q", got)
	}
	// What goes upstream is the rewritten request, not the parsed URI.
	if w := ctx.Request.String(); !strings.HasPrefix(w, "GET /a/b/of/ratings$?x=/svc/y HTTP/1.1\r\nHost: ratings.internal:9080\r\n") {
		t.Fatalf("written upstream: %q", w)
	}
}

// TestRewriteRefused: rewrites the gateway cannot follow are refused by
// field.
func TestRewriteRefused(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		mod        func(ra *route.RouteAction)
	}{
		{"bad regex", "route.regex_rewrite.pattern.regex: not an RE2 regular expression", func(ra *route.RouteAction) {
			ra.RegexRewrite = &matcher.RegexMatchAndSubstitute{Pattern: &matcher.RegexMatcher{Regex: `(?<=a)b`}}
		}},
		{"both", "route.regex_rewrite: set prefix_rewrite or regex_rewrite, not both", func(ra *route.RouteAction) {
			ra.PrefixRewrite = "/a"
			ra.RegexRewrite = &matcher.RegexMatchAndSubstitute{Pattern: &matcher.RegexMatcher{Regex: `a`}}
		}},
		{"host header", "host rewrite *routev3.RouteAction_HostRewriteHeader", func(ra *route.RouteAction) {
			ra.HostRewriteSpecifier = &route.RouteAction_HostRewriteHeader{HostRewriteHeader: "x-host"}
		}},
		{"auto", "route.auto_host_rewrite", func(ra *route.RouteAction) {
			ra.HostRewriteSpecifier = &route.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)}
		}},
		{"literal", `"a b" is not a host`, func(ra *route.RouteAction) {
			ra.HostRewriteSpecifier = &route.RouteAction_HostRewriteLiteral{HostRewriteLiteral: "a b"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeRouteConfig(rewriteRoute(tc.mod))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}
