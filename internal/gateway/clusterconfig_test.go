package gateway

import (
	"testing"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestControlPlaneClusters: the gateway reads every cluster Sextant's
// control plane publishes (internal/xds) with the policy it was given.
func TestControlPlaneClusters(t *testing.T) {
	for _, tc := range []struct{ policy, want string }{
		{"", "round_robin"},
		{config.PolicyRoundRobin, "round_robin"},
		{config.PolicyLeastRequest, "least_request"},
		{config.PolicyRandom, "random"},
		{config.PolicyAdaptive, "adaptive"},
		{config.PolicyPeakEWMA, "peak_ewma"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			s, err := decodeCluster(xds.Cluster("default/orders/v2", config.Policy{LoadBalancer: tc.policy}))
			if err != nil {
				t.Fatal(err)
			}
			if s.unsupported != "" || s.policy.name != tc.want {
				t.Fatalf("policy %q (unsupported %q), want %q", s.policy.name, s.unsupported, tc.want)
			}
			if s.service != "default/orders" || s.subsetName != "v2" {
				t.Fatalf("service %q, subset %q: want default/orders, v2", s.service, s.subsetName)
			}
		})
	}
}
