package push_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

const redirectCORSConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets:
  - {name: stable, labels: {color: stable}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - match: [{headers: {x-group: {exact: moved}}}]
    redirect: {uri: /elsewhere, redirectCode: 308}
  - corsPolicy: {allowOrigins: [{exact: 'https://shop.example'}], allowMethods: [POST]}
    rewrite: {authority: orders.internal}
    route: [{destination: {host: orders, subset: stable}}]
`

// TestGRPCXDSClientRedirectAndCORS: grpc-go's own xDS client takes the
// route config of a VirtualService with a redirect, a corsPolicy and a
// rewrite (the CORS filter and its per-route config are optional, which
// it skips): calls of the route with the CORS policy and rewrite reach the
// backend, and a call the redirect matches fails UNAVAILABLE, as grpc-go
// treats any action but a route (docs/controlplane.md).
func TestGRPCXDSClientRedirectAndCORS(t *testing.T) {
	ctx := context.Background()
	s1 := startBackend(t, "stable-1")
	reg := registryWith(t, redirectCORSConfig)
	reg.Upsert(s1.instance("stable"))
	cp := startControlPlane(t, ctx, reg, nil)
	client := testgrpc.NewTestServiceClient(dial(t, cp, "client-redirect"))
	settle(t, client, "", 5, func(got map[string]int) bool { return got["stable-1"] == 5 })

	before := s1.calls.Load()
	for range 3 {
		_, err := call(ctx, client, "moved")
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "supported route action") {
			t.Fatalf("redirected call: %v, want UNAVAILABLE: no supported route action", err)
		}
	}
	if n := s1.calls.Load() - before; n != 0 {
		t.Fatalf("redirected calls reached the backend %d times", n)
	}
}
