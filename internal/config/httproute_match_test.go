package config

import "testing"

// TestOnGateway: on a Gateway's port, a route keeps the matches whose
// gateways name that Gateway (or none) and whose port is that port (or
// none), those two cleared; a route left without matches is left out.
func TestOnGateway(t *testing.T) {
	objs, err := Decode([]byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: shop}
spec:
  hosts: [orders.example.com]
  gateways: [edge, other/edge2]
  http:
  - match: [{gateways: [edge], port: 80, uri: {prefix: /a}}, {gateways: [other/edge2], uri: {prefix: /b}}]
    route: [{destination: {host: orders}}]
  - match: [{port: 443}]
    route: [{destination: {host: orders}}]
  - route: [{destination: {host: orders}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	vs := objs[0]
	edge := Key{Kind: KindGateway, Namespace: "shop", Name: "edge"}
	on := OnGateway(vs, []Key{edge}, 80)
	http := on.VirtualService.Http
	if len(http) != 2 || len(http[0].Match) != 1 || http[0].Match[0].GetUri().GetPrefix() != "/a" ||
		http[0].Match[0].Port != 0 || http[0].Match[0].Gateways != nil || len(http[1].Match) != 0 {
		t.Fatalf("on edge:80: %v", http)
	}
	if len(vs.VirtualService.Http) != 3 || len(vs.VirtualService.Http[0].Match) != 2 {
		t.Fatal("the stored VirtualService changed")
	}
	on = OnGateway(vs, []Key{{Kind: KindGateway, Namespace: "other", Name: "edge2"}}, 443)
	if http := on.VirtualService.Http; len(http) != 3 || http[0].Match[0].GetUri().GetPrefix() != "/b" {
		t.Fatalf("on other/edge2:443: %v", http)
	}
}
