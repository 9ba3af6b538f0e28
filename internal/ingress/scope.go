package ingress

import (
	"regexp"
	"slices"
	"strings"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// A policy applies to the workloads of its namespace (the root
// namespace's: of any namespace), and the gateway workload a Gateway
// configures is in the Gateway's namespace. Gateways of several namespaces
// share a port's listener, so a policy selecting one namespace's Gateway
// must not judge the calls another namespace's Gateway serves there: on
// such a port each policy is scoped to the hosts the Gateways it selects
// route (the virtual hosts their servers claimed), as the gateway picks a
// virtual host: exact name first, then the longest *.suffix, then "*".

// allowOthers names the ALLOW policy that lets through, on a shared port,
// the calls of Gateways without ALLOW policies of their own: without it,
// another namespace's ALLOW policy would deny them all.
const allowOthers = "sextant-gateways-without-allow-policies"

// portFilters is the RBAC filters of port p: the policies selecting each
// Gateway serving there, each scoped to the hosts of the Gateways it
// selects when they are not all of the port's (owners: domain -> the
// Gateway whose server claimed it, from routes).
func portFilters(p *port, gws []*config.Entry, sec *config.Security, owners map[string]config.Key) []*hcmv3.HttpFilter {
	if sec == nil {
		return nil
	}
	var keys []config.Key
	byGW := map[config.Key][]*config.Object{}
	for _, sv := range p.servers {
		if _, ok := byGW[sv.gw]; ok {
			continue
		}
		keys = append(keys, sv.gw)
		byGW[sv.gw] = gatewayPolicies(sv.gw, gws, sec, p.number)
	}
	all := portPolicies(p, gws, sec)
	filters := xds.RBACFilters(all)
	scopes := map[string]*rbacconfigv3.Permission{} // "ns[NS]-policy[NAME]-rule[" -> its hosts
	for _, o := range all {
		var sel []config.Key
		for _, k := range keys {
			if slices.Contains(byGW[k], o) {
				sel = append(sel, k)
			}
		}
		if len(sel) < len(keys) {
			scopes["ns["+o.Namespace+"]-policy["+o.Name+"]-rule["] = hostScope(sel, owners)
		}
	}
	if len(scopes) == 0 {
		return filters // every policy judges every Gateway of the port
	}
	var withAllow, without []config.Key
	for _, k := range keys {
		if slices.ContainsFunc(byGW[k], func(o *config.Object) bool {
			return o.AuthorizationPolicy.GetAction() == security.AuthorizationPolicy_ALLOW
		}) {
			withAllow = append(withAllow, k)
		} else {
			without = append(without, k)
		}
	}
	for _, f := range filters {
		rb := &rbacv3.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(rb); err != nil || rb.Rules == nil {
			continue // built above: not expected
		}
		for name, pol := range rb.Rules.Policies {
			for prefix, scope := range scopes {
				if strings.HasPrefix(name, prefix) {
					pol.Permissions = []*rbacconfigv3.Permission{andPerm(orPerm(pol.Permissions), scope)}
				}
			}
		}
		if f.Name == xds.RBACAllowFilter && len(without) > 0 {
			if rb.Rules.Policies == nil { // an ALLOW policy with no rules (allow-nothing) unmarshals so
				rb.Rules.Policies = map[string]*rbacconfigv3.Policy{}
			}
			rb.Rules.Policies[allowOthers] = &rbacconfigv3.Policy{
				Permissions: []*rbacconfigv3.Permission{notPerm(hostScope(withAllow, owners))},
				Principals:  []*rbacconfigv3.Principal{{Identifier: &rbacconfigv3.Principal_Any{Any: true}}},
			}
		}
		a := &anypb.Any{}
		if err := anypb.MarshalFrom(a, rb, proto.MarshalOptions{Deterministic: true}); err != nil {
			continue
		}
		f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}
	}
	return filters
}

// gatewayPolicies are the AuthorizationPolicies selecting Gateway k's
// workloads (its spec.selector labels, in its namespace) on port n.
func gatewayPolicies(k config.Key, gws []*config.Entry, sec *config.Security, n uint32) []*config.Object {
	for _, e := range gws {
		if e.Object.Key == k {
			return sec.Authorization(config.Workload{Namespace: k.Namespace, Labels: label.FromMap(e.Object.Gateway.Selector), Port: n})
		}
	}
	return nil
}

// hostScope matches the calls whose Host the gateway routes to a virtual
// host of one of sel's Gateways: a domain of theirs matches and no more
// specific domain of another Gateway does.
func hostScope(sel []config.Key, owners map[string]config.Key) *rbacconfigv3.Permission {
	var mine, others []string
	for d, k := range owners {
		if slices.Contains(sel, k) {
			mine = append(mine, d)
		} else {
			others = append(others, d)
		}
	}
	slices.Sort(mine)
	slices.Sort(others)
	var ors []*rbacconfigv3.Permission
	for _, d := range mine {
		var beaten []string
		for _, o := range others {
			if moreSpecific(o, d) && config.MatchHost(d, o) {
				beaten = append(beaten, o)
			}
		}
		p := hostPerm([]string{d})
		if len(beaten) > 0 {
			p = andPerm(p, notPerm(hostPerm(beaten)))
		}
		ors = append(ors, p)
	}
	if len(ors) == 0 {
		return notPerm(&rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Any{Any: true}}) // nothing
	}
	return orPerm(ors)
}

// moreSpecific reports whether the gateway prefers domain a to b for a
// host both match: an exact name to a wildcard, a longer *.suffix to a
// shorter one, anything to "*".
func moreSpecific(a, b string) bool {
	rank := func(d string) int {
		switch {
		case d == "*":
			return 0
		case strings.HasPrefix(d, "*"):
			return 1
		}
		return 2
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra > rb
	}
	return rank(a) == 1 && len(a) > len(b)
}

// hostPerm matches a Host (:authority, with or without a port, any case)
// that one of the domains matches.
func hostPerm(domains []string) *rbacconfigv3.Permission {
	alts := make([]string, len(domains))
	for i, d := range domains {
		switch {
		case d == "*":
			alts[i] = `.*` // any Host, an IPv6 literal's colons included
		case strings.HasPrefix(d, "*."):
			alts[i] = `[^:]+` + regexp.QuoteMeta(d[1:])
		default:
			alts[i] = regexp.QuoteMeta(d)
		}
	}
	re := `(?i)^(` + strings.Join(alts, "|") + `)(:[0-9]+)?$`
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_Header{Header: &routev3.HeaderMatcher{
		Name: ":authority", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}}}}}
}

func andPerm(ps ...*rbacconfigv3.Permission) *rbacconfigv3.Permission {
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_AndRules{AndRules: &rbacconfigv3.Permission_Set{Rules: ps}}}
}

func orPerm(ps []*rbacconfigv3.Permission) *rbacconfigv3.Permission {
	if len(ps) == 1 {
		return ps[0]
	}
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_OrRules{OrRules: &rbacconfigv3.Permission_Set{Rules: ps}}}
}

func notPerm(p *rbacconfigv3.Permission) *rbacconfigv3.Permission {
	return &rbacconfigv3.Permission{Rule: &rbacconfigv3.Permission_NotRule{NotRule: p}}
}
