package ingress

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/xds"
)

const twoTeams = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: wild, namespace: team-a}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8080, protocol: HTTP}
    hosts: ["*.example.com"]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw, namespace: team-b}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8080, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: team-a}
spec:
  hosts: ["*.example.com"]
  gateways: [wild]
  http: [{route: [{destination: {host: web}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: steal, namespace: team-a}
spec:
  hosts: [shop.example.com, other.test]
  gateways: [team-b/shop-gw]
  http: [{route: [{destination: {host: web}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop, namespace: team-b}
spec:
  hosts: [shop.example.com, "*"]
  gateways: [shop-gw]
  http: [{route: [{destination: {host: web}}]}]
`

// TestBuildOwnNamespaceFirst: on team b's server open to every namespace
// ("*"), team b's VirtualService keeps shop.example.com though team a's
// sorts first; team a gets only a host team b does not route.
func TestBuildOwnNamespaceFirst(t *testing.T) {
	gws, vss := entries(t, twoTeams)
	rc, owners := routes(ListenerName(8080), mustPorts(t, gws)[8080], vss, nil)
	got := map[string][]string{}
	for _, vh := range rc.VirtualHosts {
		got[vh.Name] = vh.Domains
	}
	if d := got["VirtualService/team-b/shop"]; !slices.Equal(d, []string{"shop.example.com", "*"}) {
		t.Errorf("team b's virtual host: %v (all: %v)", d, got)
	}
	if d := got["VirtualService/team-a/steal"]; !slices.Equal(d, []string{"other.test"}) {
		t.Errorf("team a's VirtualService on team b's Gateway: %v", d)
	}
	b := config.Key{Kind: config.KindGateway, Namespace: "team-b", Name: "shop-gw"}
	if owners["shop.example.com"] != b || owners["other.test"] != b || owners["*.example.com"].Namespace != "team-a" {
		t.Errorf("owners: %v", owners)
	}
}

func mustPorts(t *testing.T, gws []*config.Entry) map[uint32]*port {
	t.Helper()
	ports, _, warns := gatewayPorts(gws)
	if len(warns) > 0 {
		t.Fatal(warns)
	}
	return ports
}

// TestBuildPolicyScopedToItsGateways: team a's DENY policy selecting
// istio: ingressgateway is scoped to the hosts team a's Gateway routes on
// the port team b's shares: *.example.com but not team b's more specific
// shop.example.com, nor team b's "*" and other.test; an ALLOW policy of
// team a's lets team b's calls through. The gateway accepts the filters.
func TestBuildPolicyScopedToItsGateways(t *testing.T) {
	gws, vss := entries(t, twoTeams)
	for _, c := range []struct {
		action         string
		filter         string
		in, out, allow []string // hosts the policy judges, does not; the allowOthers policy matches
	}{
		{"DENY", xds.RBACDenyFilter, []string{"a.example.com", "A.Example.com:8080"}, []string{"shop.example.com", "shop.example.com:8080", "other.test", "example.com", "x.test"}, nil},
		{"ALLOW", xds.RBACAllowFilter, []string{"a.example.com"}, []string{"shop.example.com", "other.test"}, []string{"shop.example.com", "other.test", "nothing.test"}},
	} {
		objs, err := config.Decode([]byte(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: lockdown, namespace: team-a}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: ` + c.action + `
  rules: [{to: [{operation: {methods: [GET]}}]}]
`))
		if err != nil {
			t.Fatal(err)
		}
		sec := config.NewSecurity("", objs)
		out, _ := BuildWithPolicies(gws, vss, nil, sec, func(string, string) *secret.Secret { return nil })
		l := out[1][ListenerName(8080)].(*listenerv3.Listener)
		a, _ := anypb.New(l)
		for _, typ := range gateway.XDSTypes() {
			if typ.URL == a.TypeUrl {
				if _, _, err := typ.Decode(a); err != nil {
					t.Fatalf("%s: the gateway refuses the listener: %v", c.action, err)
				}
			}
		}
		h := &hcmv3.HttpConnectionManager{}
		if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(h); err != nil {
			t.Fatal(err)
		}
		var rules *rbacconfigv3.RBAC
		for _, f := range h.HttpFilters {
			if f.Name == c.filter {
				rb := &rbacv3.RBAC{}
				if err := f.GetTypedConfig().UnmarshalTo(rb); err != nil {
					t.Fatal(err)
				}
				rules = rb.Rules
			}
		}
		if rules == nil {
			t.Fatalf("%s: no %s filter", c.action, c.filter)
		}
		pol := rules.Policies["ns[team-a]-policy[lockdown]-rule[0]"]
		scope := pol.GetPermissions()[0].GetAndRules().GetRules()
		if len(scope) != 2 {
			t.Fatalf("%s: policy not scoped: %v", c.action, pol)
		}
		for _, host := range c.in {
			if !hostMatches(t, scope[1], host) {
				t.Errorf("%s: team a's policy does not judge %s", c.action, host)
			}
		}
		for _, host := range c.out {
			if hostMatches(t, scope[1], host) {
				t.Errorf("%s: team a's policy judges %s", c.action, host)
			}
		}
		others, ok := rules.Policies[allowOthers]
		if ok != (c.allow != nil) {
			t.Fatalf("%s: %s present %v", c.action, allowOthers, ok)
		}
		for _, host := range c.allow {
			if !hostMatches(t, others.Permissions[0], host) {
				t.Errorf("%s: %s does not let %s through", c.action, allowOthers, host)
			}
		}
		if others != nil && hostMatches(t, others.Permissions[0], "a.example.com") {
			t.Errorf("%s: %s lets team a's host through", c.action, allowOthers)
		}
		// The same filters for a dry run.
		if byPort := GatewayRBAC(gws, vss, sec); len(byPort[8080]) != len(h.HttpFilters)-3 { // all but the CORS and fault filters and the router
			t.Errorf("%s: GatewayRBAC: %v", c.action, byPort[8080])
		}
	}
}

// hostMatches evaluates the host part of a permission (any, and, or, not,
// an :authority regex) for Host host, as the gateway's RBAC engine does
// (Go's regexp; TestTenantAuthorizationPolicyScope runs the engine itself).
func hostMatches(t *testing.T, p *rbacconfigv3.Permission, host string) bool {
	t.Helper()
	switch r := p.Rule.(type) {
	case *rbacconfigv3.Permission_Any:
		return r.Any
	case *rbacconfigv3.Permission_AndRules:
		for _, q := range r.AndRules.Rules {
			if !hostMatches(t, q, host) {
				return false
			}
		}
		return true
	case *rbacconfigv3.Permission_OrRules:
		for _, q := range r.OrRules.Rules {
			if hostMatches(t, q, host) {
				return true
			}
		}
		return false
	case *rbacconfigv3.Permission_NotRule:
		return !hostMatches(t, r.NotRule, host)
	case *rbacconfigv3.Permission_Header:
		sm, ok := r.Header.HeaderMatchSpecifier.(*routev3.HeaderMatcher_StringMatch)
		if r.Header.Name != ":authority" || !ok || sm.StringMatch.GetSafeRegex() == nil {
			t.Fatalf("not a host matcher: %v", r.Header)
		}
		return regexp.MustCompile(sm.StringMatch.GetSafeRegex().Regex).MatchString(host)
	}
	t.Fatalf("not a host permission: %v", p)
	return false
}

// TestBuildOlderGatewayKeepsItsHost: two Gateways a store holds for one
// port and host (written before applies refused the second): the one whose
// last change is older serves the host with its certificate, though the
// other's key sorts first; the other's server is warned about.
func TestBuildOlderGatewayKeepsItsHost(t *testing.T) {
	gws, vss := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw, namespace: team-a}
spec:
  servers:
  - port: {number: 8443, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: SIMPLE, credentialName: a-cert}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw, namespace: team-b}
spec:
  servers:
  - port: {number: 8443, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: SIMPLE, credentialName: b-cert}
`)
	gws[0].Revision, gws[1].Revision = 9, 5 // team b's is older
	out, warns := Build(gws, vss, func(ns, name string) *secret.Secret { return testSecret(t, ns, name, false) })
	l := out[1][ListenerName(8443)].(*listenerv3.Listener)
	if len(l.FilterChains) != 1 {
		t.Fatalf("%d filter chains", len(l.FilterChains))
	}
	if _, ok := out[0][SecretName("team-b", "b-cert")]; !ok || len(out[0]) != 1 {
		t.Errorf("secrets published: %v, want team b's only", slices.Collect(maps.Keys(out[0])))
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "Gateway/team-a/shop-gw spec.servers[0]: host \"shop.example.com\" is already served") {
		t.Errorf("warnings: %v", warns)
	}
}

// TestBuildAllowNothingPolicy: Istio's allow-nothing policy (ALLOW, no
// rules) on team a's Gateways beside team b's unpoliced one on the port:
// the build does not panic (its ALLOW filter's policies unmarshal as a nil
// map), team b's hosts are let through, team a's are not.
func TestBuildAllowNothingPolicy(t *testing.T) {
	gws, vss := entries(t, twoTeams)
	objs, err := config.Decode([]byte(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-nothing, namespace: team-a}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := BuildWithPolicies(gws, vss, nil, config.NewSecurity("", objs), func(string, string) *secret.Secret { return nil })
	l := out[1][ListenerName(8080)].(*listenerv3.Listener)
	h := &hcmv3.HttpConnectionManager{}
	if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	var others *rbacconfigv3.Policy
	for _, f := range h.HttpFilters {
		if f.Name == xds.RBACAllowFilter {
			rb := &rbacv3.RBAC{}
			if err := f.GetTypedConfig().UnmarshalTo(rb); err != nil {
				t.Fatal(err)
			}
			others = rb.Rules.GetPolicies()[allowOthers]
		}
	}
	if others == nil {
		t.Fatalf("no %s policy in the ALLOW filter: team b's calls would be denied", allowOthers)
	}
	for host, want := range map[string]bool{"shop.example.com": true, "[::1]:8080": true, "a.example.com": false} {
		if got := hostMatches(t, others.Permissions[0], host); got != want {
			t.Errorf("%s lets %s through: %v, want %v", allowOthers, host, got, want)
		}
	}
}
