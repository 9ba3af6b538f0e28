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

// localityClient is grpc-go's own xDS client with its bootstrap's node in
// region/zone.
func localityClient(t *testing.T, cp *controlPlane, region, zone string) testgrpc.TestServiceClient {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "client-%s-%s", "metadata": {"NAMESPACE": "default"}, "locality": {"region": %q, "zone": %q}}
	}`, cp.addr, region, zone, region, zone)
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///orders", grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// zonedBackend is a backend registered in region/zone.
func zonedBackend(t *testing.T, reg *pushtest.Registry, name, region, zone string) {
	in := startBackend(t, name).instance("stable")
	in.Metadata = label.FromMap(map[string]string{"region": region, "zone": zone})
	reg.Upsert(in)
}

// A DestinationRule's localityLbSetting reaches grpc-go: failover sends a
// client of region r1 to region r3 before region r2; distribute splits a
// zone's calls 80/20 by locality weights (within binomial bounds).
func TestGRPCXDSClientLocalityLbSetting(t *testing.T) {
	t.Run("failover", func(t *testing.T) {
		reg := registryWith(t, `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy: {loadBalancer: {localityLbSetting: {failover: [{from: r1, to: r3}]}}}
`)
		zonedBackend(t, reg, "orders-r2", "r2", "x")
		zonedBackend(t, reg, "orders-r3", "r3", "y")
		client := localityClient(t, startControlPlane(t, context.Background(), reg, nil), "r1", "a")
		got := map[string]int{}
		for range 100 {
			name, err := call(context.Background(), client, "")
			if err != nil {
				t.Fatal(err)
			}
			got[name]++
		}
		if got["orders-r3"] != 100 {
			t.Fatalf("failover r1 -> r3: calls %v, want all to r3", got)
		}
	})
	t.Run("distribute", func(t *testing.T) {
		reg := registryWith(t, `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        distribute: [{from: "r1/a/*", to: {"r1/a": 80, "r1/b": 20}}]
`)
		zonedBackend(t, reg, "orders-a", "r1", "a")
		zonedBackend(t, reg, "orders-b", "r1", "b")
		client := localityClient(t, startControlPlane(t, context.Background(), reg, nil), "r1", "a")
		// Until both localities are connected (bounded).
		seen := map[string]bool{}
		for i := 0; i < 2000 && len(seen) < 2; i++ {
			name, err := call(context.Background(), client, "")
			if err != nil {
				t.Fatal(err)
			}
			seen[name] = true
		}
		const n = 1000
		got := map[string]int{}
		for range n {
			name, err := call(context.Background(), client, "")
			if err != nil {
				t.Fatal(err)
			}
			got[name]++
		}
		// 80% of 1,000, sd sqrt(1000*0.8*0.2) = 12.6: 5 sd either side.
		if a := got["orders-a"]; a < 737 || a > 863 || got["orders-a"]+got["orders-b"] != n {
			t.Fatalf("distribute 80/20: calls %v of %d", got, n)
		}
	})
}
