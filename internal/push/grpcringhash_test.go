package push_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

const ringHashConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy:
    loadBalancer:
      consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 1024}}
`

// TestGRPCXDSClientRingHash: grpc-go's own xDS client follows a
// DestinationRule's consistentHash by header as Sextant publishes it (the
// ring_hash policy, gRFC A42, and the route's header hash_policy): every
// call with one x-user goes to one backend, and the users spread over the
// backends.
func TestGRPCXDSClientRingHash(t *testing.T) {
	reg := registryWith(t, ringHashConfig)
	for i := range 4 {
		reg.Upsert(startBackend(t, fmt.Sprintf("orders-%d", i)).instance("stable"))
	}
	cp := startControlPlane(t, context.Background(), reg, nil)
	client := testgrpc.NewTestServiceClient(dial(t, cp, "client-ringhash"))
	byUser := func(user string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-user", user), 10*time.Second)
		defer cancel()
		r, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("user %s: %v", user, err)
		}
		return r.Hostname
	}
	// A ring connects to a backend when a call first picks it (gRFC A42):
	// until then its calls go to the next ready one. Once every backend has
	// answered, each user's backend stands.
	const users = 64
	seen := map[string]bool{}
	deadline := time.Now().Add(15 * time.Second)
	for len(seen) < 4 && time.Now().Before(deadline) {
		for i := range users {
			seen[byUser(fmt.Sprintf("user-%d", i))] = true
		}
	}
	if len(seen) < 4 {
		t.Fatalf("64 users reached only %v", seen)
	}
	first := map[string]string{}
	spread := map[string]int{}
	for i := range users {
		u := fmt.Sprintf("user-%d", i)
		first[u] = byUser(u)
		spread[first[u]]++
	}
	if len(spread) < 3 {
		t.Fatalf("64 users went to %v, want them spread", spread)
	}
	for round := range 3 {
		for u, b := range first {
			if got := byUser(u); got != b {
				t.Fatalf("round %d: %s went to %s, before to %s", round, u, got, b)
			}
		}
	}
}
