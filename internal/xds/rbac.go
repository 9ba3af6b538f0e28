package xds

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/config"
)

// RBACFilterType is the type URL of Envoy's RBAC HTTP filter, which
// grpc-go's xDS server implements (gRFC A41).
const RBACFilterType = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"

// The names of the RBAC filters an inbound listener carries, in order.
const (
	RBACAuditFilter = "sextant.rbac.audit"
	RBACDenyFilter  = "sextant.rbac.deny"
	RBACAllowFilter = "sextant.rbac.allow"
)

// deterministic encodes maps (RBAC's policies) in key order, so that an
// unchanged policy set encodes to the same bytes and wakes nobody.
var deterministic = proto.MarshalOptions{Deterministic: true}

// RBACFilters translates the AuthorizationPolicies that apply to one
// workload into Envoy RBAC HTTP filters, as Istio does: AUDIT policies in a
// LOG filter (Envoy logs; grpc-go ignores LOG filters, gRFC A41), DENY
// policies in a DENY filter, then ALLOW policies in an ALLOW filter. A
// request is denied if any DENY policy matches it, or if ALLOW policies
// exist and none matches; with no ALLOW policy every request not denied is
// allowed. Each rule is one RBAC policy named "ns[NS]-policy[NAME]-rule[I]".
// An ALLOW policy without rules matches nothing (Istio's allow-nothing); a
// DENY policy without rules denies nothing.
func RBACFilters(policies []*config.Object) []*hcmv3.HttpFilter {
	type group struct {
		name   string
		action rbacconfigv3.RBAC_Action
		rules  map[string]*rbacconfigv3.Policy
		any    bool
	}
	groups := []*group{
		{name: RBACAuditFilter, action: rbacconfigv3.RBAC_LOG},
		{name: RBACDenyFilter, action: rbacconfigv3.RBAC_DENY},
		{name: RBACAllowFilter, action: rbacconfigv3.RBAC_ALLOW},
	}
	for _, o := range policies {
		ap := o.AuthorizationPolicy
		if ap == nil {
			continue // not an AuthorizationPolicy
		}
		var g *group
		switch ap.Action {
		case security.AuthorizationPolicy_AUDIT:
			g = groups[0]
		case security.AuthorizationPolicy_DENY:
			g = groups[1]
		case security.AuthorizationPolicy_ALLOW:
			g = groups[2]
		default:
			continue // refused at apply time
		}
		g.any = true
		if g.rules == nil {
			g.rules = map[string]*rbacconfigv3.Policy{}
		}
		for i, r := range ap.Rules {
			g.rules[fmt.Sprintf("ns[%s]-policy[%s]-rule[%d]", o.Namespace, o.Name, i)] = rulePolicy(r)
		}
	}
	var out []*hcmv3.HttpFilter
	for _, g := range groups {
		if !g.any {
			continue
		}
		a := &anypb.Any{}
		if err := anypb.MarshalFrom(a, &rbacv3.RBAC{Rules: &rbacconfigv3.RBAC{Action: g.action, Policies: g.rules}}, deterministic); err != nil {
			continue // not expected: built from valid messages
		}
		out = append(out, &hcmv3.HttpFilter{Name: g.name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}})
	}
	return out
}

// rulePolicy is one rule as an RBAC policy: its operations (to) and
// request conditions as the permission, its sources (from) and
// connection conditions as the principal. Lists within a field are ORed,
// fields and conditions ANDed, as Istio reads them.
func rulePolicy(r *security.Rule) *rbacconfigv3.Policy {
	var perms []*rbacconfigv3.Permission
	var ids []*rbacconfigv3.Principal
	if len(r.To) > 0 {
		var ors []*rbacconfigv3.Permission
		for _, t := range r.To {
			ors = append(ors, operationPermission(t.GetOperation()))
		}
		perms = append(perms, orPerm(ors))
	}
	if len(r.From) > 0 {
		var ors []*rbacconfigv3.Principal
		for _, f := range r.From {
			ors = append(ors, sourcePrincipal(f.GetSource()))
		}
		ids = append(ids, orID(ors))
	}
	for _, c := range r.When {
		attr, header, err := config.ConditionKey(c.Key)
		if err != nil {
			continue // refused at apply time
		}
		switch attr {
		case config.CondRequestHeader:
			perms = appendPerm(perms, c.Values, c.NotValues, func(v string) *rbacconfigv3.Permission { return headerPerm(header, v) })
		case config.CondDestinationPort:
			perms = appendPerm(perms, c.Values, c.NotValues, portPerm)
		case config.CondSourcePrincipal:
			ids = appendID(ids, c.Values, c.NotValues, principalID)
		case config.CondSourceNamespace:
			ids = appendID(ids, c.Values, c.NotValues, namespaceID)
		case config.CondSourceIP:
			ids = appendID(ids, c.Values, c.NotValues, ipID)
		case config.CondRequestPrincipal, config.CondRequestAudiences, config.CondRequestPresenter, config.CondRequestClaims:
			ids = appendID(ids, c.Values, c.NotValues, jwtConditionID(attr, header))
		}
	}
	return &rbacconfigv3.Policy{
		Permissions: []*rbacconfigv3.Permission{andPerm(perms)},
		Principals:  []*rbacconfigv3.Principal{andID(ids)},
	}
}

func operationPermission(op *security.Operation) *rbacconfigv3.Permission {
	var and []*rbacconfigv3.Permission
	host := func(v string) *rbacconfigv3.Permission {
		m := stringMatcher(v)
		m.IgnoreCase = true
		return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Header{Header: &routev3.HeaderMatcher{
			Name: ":authority", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: m}}}}
	}
	method := func(v string) *rbacconfigv3.Permission { return headerPerm(":method", v) }
	path := func(v string) *rbacconfigv3.Permission {
		return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
			Rule: &matcherv3.PathMatcher_Path{Path: stringMatcher(v)}}}}
	}
	and = appendPerm(and, op.Hosts, op.NotHosts, host)
	and = appendPerm(and, op.Ports, op.NotPorts, portPerm)
	and = appendPerm(and, op.Methods, op.NotMethods, method)
	and = appendPerm(and, op.Paths, op.NotPaths, path)
	return andPerm(and)
}

func sourcePrincipal(s *security.Source) *rbacconfigv3.Principal {
	var and []*rbacconfigv3.Principal
	and = appendID(and, s.Principals, s.NotPrincipals, principalID)
	and = appendID(and, s.Namespaces, s.NotNamespaces, namespaceID)
	and = appendID(and, s.IpBlocks, s.NotIpBlocks, ipID)
	and = appendID(and, s.RequestPrincipals, s.NotRequestPrincipals, requestPrincipalID)
	return andID(and)
}

// appendPerm appends to and the OR of values and the NOT of the OR of
// notValues (each when not empty).
func appendPerm(and []*rbacconfigv3.Permission, values, notValues []string, f func(string) *rbacconfigv3.Permission) []*rbacconfigv3.Permission {
	each := func(vs []string) *rbacconfigv3.Permission {
		var ors []*rbacconfigv3.Permission
		for _, v := range vs {
			ors = append(ors, f(v))
		}
		return orPerm(ors)
	}
	if len(values) > 0 {
		and = append(and, each(values))
	}
	if len(notValues) > 0 {
		and = append(and, &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_NotRule{NotRule: each(notValues)}})
	}
	return and
}

func appendID(and []*rbacconfigv3.Principal, values, notValues []string, f func(string) *rbacconfigv3.Principal) []*rbacconfigv3.Principal {
	each := func(vs []string) *rbacconfigv3.Principal {
		var ors []*rbacconfigv3.Principal
		for _, v := range vs {
			ors = append(ors, f(v))
		}
		return orID(ors)
	}
	if len(values) > 0 {
		and = append(and, each(values))
	}
	if len(notValues) > 0 {
		and = append(and, &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_NotId{NotId: each(notValues)}})
	}
	return and
}

func orPerm(ps []*rbacconfigv3.Permission) *rbacconfigv3.Permission {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_OrRules{OrRules: &rbacconfigv3.Permission_Set{Rules: ps}}}
}

func andPerm(ps []*rbacconfigv3.Permission) *rbacconfigv3.Permission {
	switch len(ps) {
	case 0:
		return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Any{Any: true}}
	case 1:
		return ps[0]
	}
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_AndRules{AndRules: &rbacconfigv3.Permission_Set{Rules: ps}}}
}

func orID(ps []*rbacconfigv3.Principal) *rbacconfigv3.Principal {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_OrIds{OrIds: &rbacconfigv3.Principal_Set{Ids: ps}}}
}

func andID(ps []*rbacconfigv3.Principal) *rbacconfigv3.Principal {
	switch len(ps) {
	case 0:
		return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_Any{Any: true}}
	case 1:
		return ps[0]
	}
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_AndIds{AndIds: &rbacconfigv3.Principal_Set{Ids: ps}}}
}

func headerPerm(name, v string) *rbacconfigv3.Permission {
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Header{Header: &routev3.HeaderMatcher{
		Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: stringMatcher(v)}}}}
}

func portPerm(v string) *rbacconfigv3.Permission {
	n, _ := strconv.ParseUint(v, 10, 16) // validated at apply time
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_DestinationPort{DestinationPort: uint32(n)}}
}

// principalID matches the peer certificate's URI SAN: Istio's principal
// "TD/ns/NS/sa/SA" is the SPIFFE ID spiffe://TD/ns/NS/sa/SA.
func principalID(v string) *rbacconfigv3.Principal {
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_Authenticated_{Authenticated: &rbacconfigv3.Principal_Authenticated{
		PrincipalName: stringMatcher(config.Principal(v))}}}
}

// namespaceID matches any service account of namespace v (a "*" in it
// matches within one path segment).
func namespaceID(v string) *rbacconfigv3.Principal {
	ns := strings.ReplaceAll(regexp.QuoteMeta(v), `\*`, `[^/]*`)
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_Authenticated_{Authenticated: &rbacconfigv3.Principal_Authenticated{
		PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{
			Regex: `^spiffe://[^/]+/ns/` + ns + `/sa/[^/]+$`}}}}}}
}

func ipID(v string) *rbacconfigv3.Principal {
	p, err := config.ParseIPBlock(v)
	if err != nil {
		p = netip.PrefixFrom(netip.IPv6Unspecified(), 128) // refused at apply time; never matches a real peer
	}
	return &rbacconfigv3.Principal{Identifier: &rbacconfigv3.Principal_DirectRemoteIp{DirectRemoteIp: &corev3.CidrRange{
		AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}}}
}

// stringMatcher reads Istio's string match: "*" any non-empty value,
// "x*" a prefix, "*x" a suffix, else exact.
func stringMatcher(v string) *matcherv3.StringMatcher {
	switch {
	case v == "*":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}}
	case strings.HasSuffix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(v, "*")}}
	case strings.HasPrefix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(v, "*")}}
	}
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
}

// SecurityFilters are the HTTP filters of the security policies among
// objs, in Istio's order: the JWT filter of the RequestAuthentications
// (JWTFilter), then the RBAC filters of the AuthorizationPolicies
// (RBACFilters).
func SecurityFilters(objs []*config.Object) []*hcmv3.HttpFilter {
	out := RBACFilters(objs)
	if f := JWTFilter(objs); f != nil {
		out = append([]*hcmv3.HttpFilter{f}, out...)
	}
	return out
}

// WithHTTPFilters puts filters first in the HTTP filters of every HTTP
// connection manager of l (before the router): a gateway's listener gets
// the RBAC filters of the AuthorizationPolicies selecting its gateway.
func WithHTTPFilters(l *listenerv3.Listener, filters []*hcmv3.HttpFilter) error {
	if len(filters) == 0 {
		return nil
	}
	for _, fc := range l.FilterChains {
		for _, f := range fc.Filters {
			tc := f.GetTypedConfig()
			if tc == nil {
				continue
			}
			h := &hcmv3.HttpConnectionManager{}
			if tc.MessageIs(h) {
				if err := tc.UnmarshalTo(h); err != nil {
					return fmt.Errorf("xds: listener %s: %w", l.Name, err)
				}
				h.HttpFilters = append(append([]*hcmv3.HttpFilter{}, filters...), h.HttpFilters...)
				a := &anypb.Any{}
				if err := anypb.MarshalFrom(a, h, deterministic); err != nil {
					return fmt.Errorf("xds: listener %s: %w", l.Name, err)
				}
				f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
			}
		}
	}
	return nil
}
