//lint:file-ignore SA1019 Istio's deprecated corsPolicy.allowOrigin is still written in configs; it is read as Istio reads it.

package xds

import (
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
)

// CORSFilterName is Envoy's CORS HTTP filter: every HTTP listener lists
// it first, as Istio does, marked optional (grpc-go does not implement it
// and would refuse the listener otherwise); a route's corsPolicy is its
// typed_per_filter_config under this name, a FilterConfig marked optional
// for the same reason.
const CORSFilterName = "envoy.filters.http.cors"

// CORSHTTPFilter is the listeners' entry of the CORS filter, shared:
// nothing may change it.
func CORSHTTPFilter() *hcmv3.HttpFilter { return corsFilter }

var corsFilter = func() *hcmv3.HttpFilter {
	a, _ := anypb.New(&corsv3.Cors{})
	return &hcmv3.HttpFilter{Name: CORSFilterName, IsOptional: true, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}}
}()

// corsConfig is a route's corsPolicy as Istio translates it: origins as
// string matchers (the deprecated allowOrigin as exact ones), lists joined
// by commas, maxAge in seconds, unmatchedPreflights IGNORE as
// forward_not_matching_preflights false; nil when there is none.
func corsConfig(in *networking.CorsPolicy) *anypb.Any {
	if in == nil {
		return nil
	}
	out := &corsv3.CorsPolicy{
		AllowMethods:  strings.Join(in.AllowMethods, ","),
		AllowHeaders:  strings.Join(in.AllowHeaders, ","),
		ExposeHeaders: strings.Join(in.ExposeHeaders, ","),
		FilterEnabled: &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: 100}},
	}
	for _, o := range in.AllowOrigin {
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: o}})
	}
	for _, sm := range in.AllowOrigins {
		m := &matcherv3.StringMatcher{}
		switch x := sm.GetMatchType().(type) {
		case *networking.StringMatch_Exact:
			m.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: x.Exact}
		case *networking.StringMatch_Prefix:
			m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: x.Prefix}
		case *networking.StringMatch_Regex:
			m.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: x.Regex}}
		default:
			continue
		}
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, m)
	}
	if in.MaxAge != nil {
		out.MaxAge = strconv.FormatInt(int64(in.MaxAge.AsDuration().Seconds()), 10)
	}
	if in.AllowCredentials != nil {
		out.AllowCredentials = wrapperspb.Bool(in.AllowCredentials.GetValue())
	}
	if in.UnmatchedPreflights == networking.CorsPolicy_IGNORE {
		out.ForwardNotMatchingPreflights = wrapperspb.Bool(false)
	}
	c, _ := anypb.New(out)
	a, _ := anypb.New(&routev3.FilterConfig{Config: c, IsOptional: true})
	return a
}
