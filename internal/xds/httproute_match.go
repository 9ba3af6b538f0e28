package xds

import (
	"slices"
	"strconv"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
)

// matchExtras reports whether a match uses a field routeMatchExtras
// writes (the hand encoder then falls back to messages).
func matchExtras(m *networking.HTTPMatchRequest) bool {
	return m != nil && (m.Scheme != nil || m.Authority != nil || m.Port != 0 || len(m.QueryParams) > 0 ||
		len(m.WithoutHeaders) > 0 || m.IgnoreUriCase || len(m.Gateways) > 0 || sourceMatched(m))
}

// routeMatchExtras adds to rm what Istio writes for a match's scheme and
// authority (header matchers on :scheme and :authority), ignoreUriCase
// (case_sensitive false), queryParams (query_parameters, by name) and
// withoutHeaders (inverted header matchers; {} is the header's absence).
// A port left in a match (the mesh's: a Gateway's routes are built per
// port, config.OnGateway) matches the port the request's authority names.
func routeMatchExtras(rm *routev3.RouteMatch, m *networking.HTTPMatchRequest) {
	if m.IgnoreUriCase {
		rm.CaseSensitive = wrapperspb.Bool(false)
	}
	if m.Scheme != nil {
		rm.Headers = append(rm.Headers, headerMatch(":scheme", m.Scheme))
	}
	if m.Authority != nil {
		rm.Headers = append(rm.Headers, headerMatch(":authority", m.Authority))
	}
	if m.Port != 0 {
		rm.Headers = append(rm.Headers, &routev3.HeaderMatcher{Name: ":authority", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
			StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: ":" + strconv.FormatUint(uint64(m.Port), 10)}}}})
	}
	for _, n := range sortedNames(m.WithoutHeaders) {
		sm := m.WithoutHeaders[n]
		var hm *routev3.HeaderMatcher
		if sm.GetMatchType() == nil {
			hm = &routev3.HeaderMatcher{Name: n, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
		} else {
			hm = headerMatch(n, sm)
		}
		hm.InvertMatch = true
		rm.Headers = append(rm.Headers, hm)
	}
	for _, n := range sortedNames(m.QueryParams) {
		hm := headerMatch(n, m.QueryParams[n])
		rm.QueryParameters = append(rm.QueryParameters, &routev3.QueryParameterMatcher{Name: n,
			QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{StringMatch: hm.GetStringMatch()}})
	}
}

func sortedNames(m map[string]*networking.StringMatch) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
