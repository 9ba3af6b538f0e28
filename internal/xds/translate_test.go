package xds

import (
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
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

// TestRouteRetryPolicy: routes get Istio's default retry policy unless
// their VirtualService sets retries; attempts 0 turns retries off, and
// numbers in retryOn are status codes.
func TestRouteRetryPolicy(t *testing.T) {
	const vs = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  http:
  - name: none
    match: [{uri: {prefix: /none}}]
    route: [{destination: {host: orders}}]
  - name: disabled
    match: [{uri: {prefix: /disabled}}]
    route: [{destination: {host: orders}}]
    retries: {attempts: 0}
  - name: own
    match: [{uri: {prefix: /own}}]
    route: [{destination: {host: orders}}]
    retries: {attempts: 3, perTryTimeout: 1s, retryOn: "5xx,409"}
  - name: attempts
    route: [{destination: {host: orders}}]
    retries: {attempts: 4}
  hosts: [orders]
`
	objs, err := config.Decode([]byte(vs))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "orders"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	type want struct {
		on      string
		num     uint32
		codes   []uint32
		perTry  time.Duration
		hostsOK bool // previous_hosts predicate, 5 host picks
	}
	def := &want{DefaultRetryOn, 2, []uint32{503}, 0, true}
	check := func(t *testing.T, rp *routev3.RetryPolicy, w *want) {
		t.Helper()
		if w == nil {
			if rp != nil {
				t.Fatalf("retry policy %v, want none", rp)
			}
			return
		}
		preds := rp.GetRetryHostPredicate()
		if rp.GetRetryOn() != w.on || rp.GetNumRetries().GetValue() != w.num || !slices.Equal(rp.GetRetriableStatusCodes(), w.codes) ||
			rp.GetPerTryTimeout().AsDuration() != w.perTry || len(preds) != 1 || preds[0].GetName() != "envoy.retry_host_predicates.previous_hosts" ||
			preds[0].GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate" ||
			rp.GetHostSelectionRetryMaxAttempts() != 5 {
			t.Fatalf("retry policy %v, want %+v", rp, w)
		}
	}
	t.Run("no VirtualService", func(t *testing.T) {
		vh := VirtualHost("orders", []string{"*"}, svc, nil, clusterFor, nil)
		check(t, vh.GetRoutes()[0].GetRoute().GetRetryPolicy(), def)
	})
	vh := VirtualHost("orders", []string{"*"}, svc, objs[0], clusterFor, nil)
	for _, tc := range []struct {
		route string
		want  *want
	}{
		{"none", def},
		{"disabled", nil},
		{"own", &want{"5xx,retriable-status-codes", 3, []uint32{409}, time.Second, true}},
		{"attempts", &want{DefaultRetryOn, 4, []uint32{503}, 0, true}},
	} {
		t.Run(tc.route, func(t *testing.T) {
			for _, r := range vh.GetRoutes() {
				if r.GetName() == tc.route {
					check(t, r.GetRoute().GetRetryPolicy(), tc.want)
					return
				}
			}
			t.Fatalf("no route %q", tc.route)
		})
	}
}

// TestDefaultOutlierDetection: a cluster whose DestinationRule sets no
// outlierDetection ejects unreachable endpoints only; a rule's own wins.
func TestDefaultOutlierDetection(t *testing.T) {
	od := Cluster("default/orders", config.Policy{}).GetOutlierDetection()
	if !od.GetSplitExternalLocalOriginErrors() || od.GetConsecutiveLocalOriginFailure().GetValue() != 5 ||
		od.GetEnforcingConsecutiveLocalOriginFailure().GetValue() != 100 || od.GetEnforcingConsecutive_5Xx() == nil ||
		od.GetEnforcingConsecutive_5Xx().GetValue() != 0 || od.GetEnforcingSuccessRate().GetValue() != 0 {
		t.Fatalf("default outlier detection %v", od)
	}
	own := &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(7)}
	od = Cluster("default/orders", config.Policy{Outlier: own}).GetOutlierDetection()
	if od.GetSplitExternalLocalOriginErrors() || od.GetConsecutive_5Xx().GetValue() != 7 || od.GetConsecutiveLocalOriginFailure() != nil {
		t.Fatalf("a DestinationRule's outlier detection became %v", od)
	}
}

// TestVirtualHostNamesDroppedRoutes: a route whose subset destinations may
// all not receive traffic is left out, and the virtual host's "sextant"
// metadata says which and why (undefined subset, or no usable endpoint);
// a virtual host that dropped nothing carries no metadata.
func TestVirtualHostNamesDroppedRoutes(t *testing.T) {
	objs, err := config.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - name: canary
    match: [{headers: {x-canary: {exact: "yes"}}}]
    route: [{destination: {host: orders, subset: v9}, weight: 50}, {destination: {host: orders, subset: v2}, weight: 50}]
  - route: [{destination: {host: orders, subset: v1}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "orders"}
	for _, tc := range []struct {
		name   string
		usable map[string]bool // subset -> a usable endpoint; absent: undefined
		routes int
		want   []string
	}{
		{"all usable", map[string]bool{"v1": true, "v2": true, "v9": true}, 2, nil},
		{"canary dropped", map[string]bool{"v1": true, "v2": false}, 1, []string{
			`spec.http[0] ("canary"): subset "v9" of default/orders is defined by no DestinationRule; subset "v2" of default/orders has no usable endpoint`}},
		{"all dropped", map[string]bool{"v1": false, "v2": false}, 0, []string{
			`spec.http[0] ("canary"): subset "v9" of default/orders is defined by no DestinationRule; subset "v2" of default/orders has no usable endpoint`,
			`spec.http[1]: subset "v1" of default/orders has no usable endpoint`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clusterFor := func(d config.Destination) (string, bool) {
				usable, defined := tc.usable[d.Subset]
				if !defined {
					return "", false
				}
				return ClusterName(d.Service, d.Subset, d.Port), usable
			}
			vh := VirtualHost("orders", []string{"orders"}, svc, objs[0], clusterFor, nil)
			var got []string
			for _, v := range vh.GetMetadata().GetFilterMetadata()["sextant"].GetFields()[DroppedRoutesField].GetListValue().GetValues() {
				got = append(got, v.GetStringValue())
			}
			if len(vh.Routes) != tc.routes || len(got) != len(tc.want) || (tc.want == nil) != (vh.Metadata == nil) {
				t.Fatalf("%d routes, dropped %q, want %d and %q", len(vh.Routes), got, tc.routes, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("dropped[%d] = %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
