package push_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
)

// TestGRPCXDSClientLocalityFailover: grpc-go's own xDS client, in zone a
// by its bootstrap's node locality, follows the EDS priorities Sextant
// sends it: calls go to zone a's backend; when the registry marks it
// unhealthy, to zone b's; back when it is healthy again. No
// DestinationRule, no outlierDetection.
func TestGRPCXDSClientLocalityFailover(t *testing.T) {
	reg := pushtest.New(0)
	a, b := startBackend(t, "orders-a"), startBackend(t, "orders-b")
	ia, ib := a.instance("stable"), b.instance("stable")
	ia.Metadata = label.FromMap(map[string]string{"region": "r1", "zone": "a"})
	ib.Metadata = label.FromMap(map[string]string{"region": "r1", "zone": "b"})
	reg.Upsert(ib)
	reg.Upsert(ia)
	cp := startControlPlane(t, context.Background(), reg, nil)
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "client-locality", "metadata": {"NAMESPACE": "default"}, "locality": {"region": "r1", "zone": "a"}}
	}`, cp.addr)
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///orders", grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := testgrpc.NewTestServiceClient(conn)
	// all reports whether n calls in a row reached want.
	all := func(want string, n int) bool {
		for range n {
			if got, err := call(context.Background(), client, ""); err != nil || got != want {
				return false
			}
		}
		return true
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	until("calls to zone a", func() bool { return all("orders-a", 1) })
	if !all("orders-a", 40) {
		t.Fatal("zone a healthy: a call went elsewhere")
	}
	down := a.instance("stable")
	down.Metadata, down.Healthy = ia.Metadata, false
	reg.Upsert(down)
	until("failover to zone b", func() bool { return all("orders-b", 10) })
	up := a.instance("stable")
	up.Metadata = ia.Metadata
	reg.Upsert(up)
	until("back to zone a", func() bool { return all("orders-a", 10) })
	// Both backends are connected now (zone b served): round robin over
	// the localities would reach b within a few calls; priorities never.
	if !all("orders-a", 100) {
		t.Fatal("zone a healthy again: a call went elsewhere")
	}
}
