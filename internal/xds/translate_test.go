package xds

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"

	"github.com/sextant-mesh/sextant/internal/config"
)

// TestClusterPolicy: every policy but round robin is published as a
// load_balancing_policy list ending in round robin over weighted
// localities, so a client that lacks the first entry falls back instead of
// rejecting the cluster (grpc-js-xds NACKs the LEAST_REQUEST enum).
func TestClusterPolicy(t *testing.T) {
	const (
		rr     = "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"
		wrrLoc = "type.googleapis.com/envoy.extensions.load_balancing_policies.wrr_locality.v3.WrrLocality"
		ts     = "type.googleapis.com/xds.type.v3.TypedStruct"
	)
	for _, tc := range []struct {
		policy string
		enum   clusterv3.Cluster_LbPolicy
		list   []string // type URLs of load_balancing_policy, nil: the enum alone
	}{
		{"", clusterv3.Cluster_ROUND_ROBIN, nil},
		{config.PolicyRoundRobin, clusterv3.Cluster_ROUND_ROBIN, nil},
		{config.PolicyLeastRequest, 0, []string{"type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest", wrrLoc}},
		{config.PolicyRandom, 0, []string{"type.googleapis.com/envoy.extensions.load_balancing_policies.random.v3.Random", wrrLoc}},
		{"adaptive", 0, []string{ts, wrrLoc}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			c := Cluster("default/orders", config.Policy{LoadBalancer: tc.policy})
			if c.GetLbPolicy() != tc.enum {
				t.Fatalf("lb_policy %v, want %v", c.GetLbPolicy(), tc.enum)
			}
			var got []string
			for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
				got = append(got, p.GetTypedExtensionConfig().GetTypedConfig().GetTypeUrl())
			}
			if !slices.Equal(got, tc.list) {
				t.Fatalf("load_balancing_policy %v, want %v", got, tc.list)
			}
			if tc.list == nil {
				return
			}
			last := new(wrrlocalityv3.WrrLocality)
			if err := c.GetLoadBalancingPolicy().GetPolicies()[len(got)-1].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(last); err != nil {
				t.Fatal(err)
			}
			if inner := last.GetEndpointPickingPolicy().GetPolicies(); len(inner) != 1 || inner[0].GetTypedExtensionConfig().GetTypedConfig().GetTypeUrl() != rr {
				t.Fatalf("fallback %v, want round robin", inner)
			}
		})
	}
}
