package xds

import (
	"bytes"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhashv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// TestConsistentHashAsIstio: a DestinationRule's consistentHash is the
// cluster's ring_hash (or maglev, then ring_hash for clients without it)
// and the hash_policy of every route to it, as Istio writes them: header,
// cookie with its TTL and path, source IP, query parameter; a subset's
// loadBalancer replaces the rule's; a route to one hashed destination
// retries without the previous_hosts predicate; the default route of a
// service without a VirtualService hashes too; the hand encoder agrees.
func TestConsistentHashAsIstio(t *testing.T) {
	objs, err := config.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings}
spec:
  host: ratings
  trafficPolicy:
    loadBalancer:
      consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 2048}}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      loadBalancer:
        consistentHash: {httpCookie: {name: affinity, path: /, ttl: 60s}, maglev: {tableSize: 65537}}
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      loadBalancer:
        consistentHash: {useSourceIp: true}
  - name: v3
    labels: {version: v3}
    trafficPolicy:
      loadBalancer:
        consistentHash: {httpQueryParameterName: u}
  - name: plain
    labels: {version: plain}
    trafficPolicy:
      loadBalancer: {simple: ROUND_ROBIN}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - match: [{uri: {prefix: /v1}}]
    route: [{destination: {host: ratings, subset: v1}}]
  - match: [{uri: {prefix: /split}}]
    route:
    - {destination: {host: ratings, subset: v2}, weight: 50}
    - {destination: {host: ratings, subset: v3}, weight: 50}
  - match: [{uri: {prefix: /plain}}]
    route: [{destination: {host: ratings, subset: plain}}]
  - route: [{destination: {host: ratings}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	dr, vs := objs[0], objs[1]

	whole := config.EffectivePolicy(dr, "", 0)
	if whole.LoadBalancer != config.PolicyRingHash || whole.RingSize != 2048 || whole.Hash != (config.HashKey{Header: "x-user"}) {
		t.Fatalf("whole service: %+v", whole)
	}
	c := Cluster("default/ratings", whole)
	if err := c.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	var rh ringhashv3.RingHash
	if ps := c.GetLoadBalancingPolicy().GetPolicies(); len(ps) != 1 || ps[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&rh) != nil ||
		rh.GetMinimumRingSize().GetValue() != 2048 {
		t.Fatalf("ring hash cluster: %v", c.GetLoadBalancingPolicy())
	}
	v1 := config.EffectivePolicy(dr, "v1", 0)
	if v1.LoadBalancer != config.PolicyMaglev || v1.RingSize != 65537 ||
		v1.Hash != (config.HashKey{Cookie: "affinity", CookiePath: "/", CookieTTL: time.Minute}) {
		t.Fatalf("subset v1: %+v", v1)
	}
	c = Cluster("default/ratings/v1", v1)
	var mg maglevv3.Maglev
	if ps := c.GetLoadBalancingPolicy().GetPolicies(); len(ps) != 2 || ps[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&mg) != nil ||
		mg.GetTableSize().GetValue() != 65537 || ps[1].GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&rh) != nil {
		t.Fatalf("maglev cluster: %v", c.GetLoadBalancingPolicy())
	}
	if c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN { // the unset legacy field
		t.Fatalf("lb_policy %v", c.GetLbPolicy())
	}

	svc := naming.ServiceKey{Namespace: "default", Name: "ratings"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	hashFor := func(d config.Destination) config.HashKey { return config.HashOf(dr, d.Subset) }
	vh := VirtualHost("ratings", []string{"ratings"}, svc, vs, clusterFor, hashFor)
	if err := RouteConfiguration("r", vh).ValidateAll(); err != nil {
		t.Fatalf("does not validate: %v", err)
	}
	a := vh.Routes[0].GetRoute()
	if hp := a.GetHashPolicy(); len(hp) != 1 || hp[0].GetCookie().GetName() != "affinity" || hp[0].GetCookie().GetTtl().AsDuration() != time.Minute ||
		hp[0].GetCookie().GetPath() != "/" {
		t.Fatalf("cookie route: %v", hp)
	}
	if rp := a.GetRetryPolicy(); len(rp.GetRetryHostPredicate()) != 0 || rp.GetHostSelectionRetryMaxAttempts() != 0 || rp.GetNumRetries().GetValue() != 2 {
		t.Fatalf("a hashed route's retries: %v", rp)
	}
	a = vh.Routes[1].GetRoute()
	if hp := a.GetHashPolicy(); len(hp) != 2 || !hp[0].GetConnectionProperties().GetSourceIp() || hp[1].GetQueryParameter().GetName() != "u" {
		t.Fatalf("split route: %v", hp)
	}
	if len(a.GetRetryPolicy().GetRetryHostPredicate()) != 1 {
		t.Fatalf("a split route keeps Istio's retry predicate: %v", a.GetRetryPolicy())
	}
	if hp := vh.Routes[2].GetRoute().GetHashPolicy(); len(hp) != 0 {
		t.Fatalf("round robin subset: %v", hp)
	}
	if hp := vh.Routes[3].GetRoute().GetHashPolicy(); len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != "x-user" {
		t.Fatalf("whole service route: %v", hp)
	}
	if len(defaultRetryPolicy.GetRetryHostPredicate()) != 1 {
		t.Fatal("the shared default retry policy was changed")
	}
	enc, err := EncodeVirtualHost("ratings", svc, vs, clusterFor, hashFor)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("ratings", nil, svc, vs, clusterFor, hashFor)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message")
	}

	// No VirtualService: the default route hashes as the rule says.
	vh = VirtualHost("ratings", []string{"ratings"}, svc, nil, clusterFor, hashFor)
	if hp := vh.Routes[0].GetRoute().GetHashPolicy(); len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != "x-user" {
		t.Fatalf("default route: %v", hp)
	}
	enc, err = EncodeVirtualHost("ratings", svc, nil, clusterFor, hashFor)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("ratings", nil, svc, nil, clusterFor, hashFor)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message (default route)")
	}
}
