package ingress

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// TestBuildDelegate: a Gateway's RDS carries a root VirtualService's
// delegate route as the delegate's routes, merged as Istio merges them
// (prefix /reviews/v2 within /reviews, the delegate's destination read in
// its own namespace), and nothing of the delegate alone.
func TestBuildDelegate(t *testing.T) {
	gws, vss := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: edge}
spec:
  servers:
  - port: {number: 8080, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop, namespace: edge}
spec:
  hosts: [shop.example.com]
  gateways: [gw]
  http:
  - match: [{uri: {prefix: /reviews}}]
    delegate: {name: reviews, namespace: team}
  - route: [{destination: {host: orders.default}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: team}
spec:
  http:
  - match: [{uri: {prefix: /reviews/v2}}]
    route: [{destination: {host: reviews, subset: v2}}]
  - route: [{destination: {host: reviews, subset: v1}}]
`)
	out, warns := Build(gws, vss, nil)
	if len(warns) > 0 {
		t.Errorf("warnings: %q", warns)
	}
	rc := out[2][ListenerName(8080)].(*routev3.RouteConfiguration)
	if len(rc.VirtualHosts) != 1 {
		t.Fatalf("virtual hosts: %v", rc.VirtualHosts)
	}
	type want struct{ prefix, cluster string }
	var got []want
	for _, r := range rc.VirtualHosts[0].Routes {
		got = append(got, want{r.GetMatch().GetPrefix(), r.GetRoute().GetCluster()})
	}
	exp := []want{{"/reviews/v2", "team/reviews/v2"}, {"/reviews", "team/reviews/v1"}, {"/", "default/orders"}}
	if len(got) != len(exp) {
		t.Fatalf("routes %v, want %v", got, exp)
	}
	for i := range exp {
		if got[i] != exp[i] {
			t.Errorf("route %d: %v, want %v", i, got[i], exp[i])
		}
	}
}
