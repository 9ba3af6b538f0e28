package push_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

const faultConfig = `
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
  - match: [{headers: {x-group: {exact: abort}}}]
    fault: {abort: {httpStatus: 503, percentage: {value: 100}}}
    route: [{destination: {host: orders, subset: stable}}]
  - match: [{headers: {x-group: {exact: denied}}}]
    fault: {abort: {grpcStatus: PERMISSION_DENIED, percentage: {value: 100}}}
    route: [{destination: {host: orders, subset: stable}}]
  - match: [{headers: {x-group: {exact: slow}}}]
    fault: {delay: {fixedDelay: 300ms, percentage: {value: 100}}}
    route: [{destination: {host: orders, subset: stable}}]
  - route: [{destination: {host: orders, subset: stable}}]
`

// TestGRPCXDSClientFaultInjection: grpc-go's own xDS client follows the
// fault injection Sextant publishes (gRFC A33: the fault filter in the
// api_listener's http_filters, the route's HTTPFault in its
// typed_per_filter_config): an HTTP 503 abort fails the call UNAVAILABLE
// and a gRPC abort with its status, neither reaching the backend; a delay
// holds the call at least that long.
func TestGRPCXDSClientFaultInjection(t *testing.T) {
	ctx := context.Background()
	s1 := startBackend(t, "stable-1")
	reg := registryWith(t, faultConfig)
	reg.Upsert(s1.instance("stable"))
	cp := startControlPlane(t, ctx, reg, nil)
	client := testgrpc.NewTestServiceClient(dial(t, cp, "client-fault"))
	settle(t, client, "", 5, func(got map[string]int) bool { return got["stable-1"] == 5 })

	before := s1.calls.Load()
	for _, c := range []struct {
		group string
		code  codes.Code
	}{{"abort", codes.Unavailable}, {"denied", codes.PermissionDenied}} {
		for range 5 {
			_, err := call(ctx, client, c.group)
			if status.Code(err) != c.code || !strings.Contains(err.Error(), "fault injection") {
				t.Fatalf("x-group %s: %v, want %v by fault injection", c.group, err, c.code)
			}
		}
	}
	if n := s1.calls.Load() - before; n != 0 {
		t.Fatalf("aborted calls reached the backend %d times", n)
	}
	t0 := time.Now()
	h, err := call(ctx, client, "slow")
	if took := time.Since(t0); err != nil || h != "stable-1" || took < 300*time.Millisecond {
		t.Fatalf("delayed call: %q %v after %v, want an answer after at least 300ms", h, err, took)
	}
}
