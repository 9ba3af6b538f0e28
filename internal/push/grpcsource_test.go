package push_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"
)

const sourceConfig = `
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
  - match: [{sourceLabels: {app: web}, sourceNamespace: default}]
    route: [{destination: {host: orders, subset: blue}}]
  - route: [{destination: {host: orders, subset: stable}}]
`

// TestGRPCXDSClientSourceLabels: grpc-go's own xDS client whose bootstrap
// node says LABELS app=web is sent the route of that source and takes it;
// a client without labels is not, and takes the default route.
func TestGRPCXDSClientSourceLabels(t *testing.T) {
	s1, b1 := startBackend(t, "stable-1"), startBackend(t, "blue-1")
	reg := registryWith(t, sourceConfig)
	reg.Upsert(s1.instance("stable"))
	reg.Upsert(b1.instance("blue"))
	cp := startControlPlane(t, context.Background(), reg, nil)
	dialLabels := func(node, labels string) testgrpc.TestServiceClient {
		bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "metadata": {"NAMESPACE": "default", "LABELS": %s}}
	}`, cp.addr, node, labels)
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
	web := dialLabels("client-web", `{"app": "web", "version": "v1"}`)
	other := dialLabels("client-other", `{"app": "batch"}`)
	settle(t, web, "", 5, func(got map[string]int) bool { return got["blue-1"] == 5 })
	if got := callsGo(t, web, "", 10); got["blue-1"] != 10 {
		t.Errorf("labelled app=web: answered by %v, want blue-1 only", got)
	}
	settle(t, other, "", 5, func(got map[string]int) bool { return got["stable-1"] == 5 })
	if got := callsGo(t, other, "", 10); got["stable-1"] != 10 {
		t.Errorf("labelled app=batch: answered by %v, want stable-1 only", got)
	}
}
