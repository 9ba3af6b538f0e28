package gateway

import (
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestDecodeMirrors: request_mirror_policies are read with their shares
// as a millionth (none: every call; 0: the policy is dropped), and what
// the gateway cannot follow is refused naming the field.
func TestDecodeMirrors(t *testing.T) {
	frac := func(n uint32, d typev3.FractionalPercent_DenominatorType) *core.RuntimeFractionalPercent {
		return &core.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: n, Denominator: d}}
	}
	rc, err := decodeRouteConfig(filterRoute(func(r *route.Route) {
		r.GetRoute().RequestMirrorPolicies = []*route.RouteAction_RequestMirrorPolicy{
			{Cluster: "all"},
			{Cluster: "half", RuntimeFraction: frac(500000, typev3.FractionalPercent_MILLION)},
			{Cluster: "tenth", RuntimeFraction: frac(10, typev3.FractionalPercent_HUNDRED)},
			{Cluster: "none", RuntimeFraction: frac(0, typev3.FractionalPercent_HUNDRED)},
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	got := rc.vhosts[0].routes[0].mirrors
	want := []mirrorSpec{{"all", 1_000_000}, {"half", 500_000}, {"tenth", 100_000}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, tc := range []struct {
		name, want string
		p          *route.RouteAction_RequestMirrorPolicy
	}{
		{"no cluster", "request_mirror_policies[0].cluster: empty", &route.RouteAction_RequestMirrorPolicy{}},
		{"cluster header", "request_mirror_policies[0].cluster_header: not supported", &route.RouteAction_RequestMirrorPolicy{ClusterHeader: "x-mirror"}},
		{"no shadow suffix", "disable_shadow_host_suffix_append: not supported", &route.RouteAction_RequestMirrorPolicy{Cluster: "c", DisableShadowHostSuffixAppend: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeRouteConfig(filterRoute(func(r *route.Route) {
				r.GetRoute().RequestMirrorPolicies = []*route.RouteAction_RequestMirrorPolicy{tc.p}
			}))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestShadowHost: "-shadow" goes after the host name, before its port, as
// Envoy writes it; after an IP address whole.
func TestShadowHost(t *testing.T) {
	for in, want := range map[string]string{
		"httpbin":           "httpbin-shadow",
		"httpbin:8000":      "httpbin-shadow:8000",
		"a.example.com:443": "a.example.com-shadow:443",
		"10.0.0.1:80":       "10.0.0.1:80-shadow",
		"[::1]:80":          "[::1]:80-shadow",
	} {
		if got := string(shadowHost([]byte(in))); got != want {
			t.Errorf("shadowHost(%q) = %q, want %q", in, got, want)
		}
	}
}
