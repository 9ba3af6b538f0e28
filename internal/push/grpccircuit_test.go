package push_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
)

const circuitConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy:
    connectionPool: {http: {http2MaxRequests: 2}}
`

// heldBackend answers a call once release is closed.
type heldBackend struct {
	testgrpc.UnimplementedTestServiceServer
	release chan struct{}
	inside  atomic.Int64
}

func (b *heldBackend) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.inside.Add(1)
	defer b.inside.Add(-1)
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &testgrpc.SimpleResponse{Hostname: "held"}, nil
}

// TestGRPCXDSClientCircuitBreaking: grpc-go's own xDS client follows the
// max_requests Sextant publishes for http2MaxRequests (gRFC A32): with
// two calls in flight, a third fails UNAVAILABLE without reaching the
// backend.
func TestGRPCXDSClientCircuitBreaking(t *testing.T) {
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &heldBackend{release: make(chan struct{})}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, b)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	reg := registryWith(t, circuitConfig)
	reg.Upsert(&instance.Instance{ID: "held-1", Namespace: "default", Service: "orders", Host: "127.0.0.1",
		Port: lis.Addr().(*net.TCPAddr).Port, Weight: 100, Healthy: true, Metadata: label.FromMap(map[string]string{"zone": "z1"})})
	cp := startControlPlane(t, ctx, reg, nil)
	client := testgrpc.NewTestServiceClient(dial(t, cp, "client-circuit"))

	held := make(chan error, 2)
	for range 2 {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err := client.UnaryCall(cctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
			held <- err
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for b.inside.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls reached the backend, want 2", b.inside.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = client.UnaryCall(cctx, &testgrpc.SimpleRequest{})
	cancel()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("third call: %v, want UNAVAILABLE (max_requests 2)", err)
	}
	t.Logf("third call: %v", err)
	if n := b.inside.Load(); n != 2 {
		t.Fatalf("%d calls at the backend, want 2", n)
	}
	close(b.release)
	for range 2 {
		if err := <-held; err != nil {
			t.Fatalf("held call: %v", err)
		}
	}
}
