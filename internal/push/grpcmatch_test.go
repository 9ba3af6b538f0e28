package push_test

import (
	"context"
	"testing"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

const matchConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets:
  - {name: stable, labels: {color: stable}}
  - {name: blue, labels: {color: blue}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - match: [{queryParams: {a: {exact: b}}}]
    route: [{destination: {host: orders, subset: blue}}]
  - match: [{headers: {x-group: {prefix: g}}, withoutHeaders: {x-group: {exact: gold}}}]
    route: [{destination: {host: orders, subset: blue}}]
  - match: [{headers: {x-group: {exact: case}}, uri: {prefix: /GRPC.TESTING}, ignoreUriCase: true}]
    route: [{destination: {host: orders, subset: blue}}]
  - match: [{headers: {x-group: {exact: authority}}, authority: {exact: orders}}]
    route: [{destination: {host: orders, subset: blue}}]
  - match: [{headers: {x-group: {exact: scheme}}, scheme: {exact: http}}]
    route: [{destination: {host: orders, subset: blue}}]
  - match: [{headers: {x-group: {exact: port}}, port: 80}]
    route: [{destination: {host: orders, subset: blue}}]
  - route: [{destination: {host: orders, subset: stable}}]
`

// TestGRPCXDSClientMatchFields: what grpc-go's own xDS client does with
// the match fields Sextant publishes (docs/controlplane.md, "Matches"): it
// follows withoutHeaders' inverted header matchers (gRFC A28) and
// ignoreUriCase's case_sensitive false; it never takes a route with
// query_parameters (gRFC A28), nor one matching :authority or :scheme
// (authority, scheme, and port, an :authority suffix): its calls' metadata
// holds neither.
func TestGRPCXDSClientMatchFields(t *testing.T) {
	s1, b1 := startBackend(t, "stable-1"), startBackend(t, "blue-1")
	reg := registryWith(t, matchConfig)
	reg.Upsert(s1.instance("stable"))
	reg.Upsert(b1.instance("blue"))
	cp := startControlPlane(t, context.Background(), reg, nil)
	client := testgrpc.NewTestServiceClient(dial(t, cp, "client-match"))
	settle(t, client, "green", 5, func(got map[string]int) bool { return got["blue-1"] == 5 })
	for group, want := range map[string]string{"green": "blue-1", "gold": "stable-1", "": "stable-1", "case": "blue-1",
		"authority": "stable-1", "scheme": "stable-1", "port": "stable-1"} {
		if got := callsGo(t, client, group, 5); got[want] != 5 {
			t.Errorf("x-group %q: answered by %v, want %s only", group, got, want)
		}
	}
}
