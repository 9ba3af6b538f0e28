package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/sextant-mesh/sextant/client"
)

// subsetsConfig is docs/controlplane.md's shape for service svc: subsets
// v1 and v2 by the label version, x-version: v2 to v2, the rest to v1.
func subsetsConfig(svc string) string {
	return fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: %[1]s}
spec:
  host: %[1]s
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: %[1]s}
spec:
  hosts: [%[1]s]
  http:
  - match: [{headers: {x-version: {exact: v2}}}]
    route: [{destination: {host: %[1]s, subset: v2}}]
  - route: [{destination: {host: %[1]s, subset: v1}}]
`, svc)
}

// startServerXDS runs a server with an xDS listener and returns its API
// client and xDS address.
func startServerXDS(t *testing.T) (*client.Client, string) {
	t.Helper()
	httpAddr, xdsAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	data := t.TempDir()
	go func() {
		done <- runServer(ctx, serverFlags{data: data, http: httpAddr, xds: xdsAddr, logFormat: "text",
			logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	waitTrue(t, 60*time.Second, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	api, err := client.New("http://" + httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	return api, xdsAddr
}

// dialXDS is grpc-go's own xDS client for xds:///target, with a bootstrap
// of its own (a new ADS stream).
func dialXDS(t *testing.T, xdsAddr, node, target string) *grpc.ClientConn {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "metadata": {"NAMESPACE": "default"}}
	}`, xdsAddr, node)
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+target, grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestGRPCClientRightAfterApply: a grpc-go xDS client that connects as soon
// as "config apply" has answered gets the applied routes from its first
// response: every call succeeds (no "unknown cluster selected for RPC") and
// reaches the subset the VirtualService names. Each of the iterations
// applies a new service's subsets and routes (so the state before the
// apply, a default route to the whole service, would send calls to either
// version).
func TestGRPCClientRightAfterApply(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, grpc-go over xDS")
	}
	ctx := context.Background()
	api, xdsAddr := startServerXDS(t)
	const iterations, calls = 10, 8
	for i := range iterations {
		svc := fmt.Sprintf("orders%d", i)
		for _, v := range []string{"v1", "v2"} {
			_, port := startGreeter(t, svc+"-"+v, false)
			if _, err := api.Register(ctx, client.Instance{ID: svc + "-" + v, Service: svc, Host: "127.0.0.1", Port: port,
				Protocol: "grpc", Metadata: map[string]string{"version": v}}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := api.ApplyConfig(ctx, []byte(subsetsConfig(svc)), false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Published == nil || !*res.Published {
			t.Fatalf("iteration %d: apply answered without publishing: %+v", i, res)
		}
		conn := dialXDS(t, xdsAddr, fmt.Sprintf("after-apply-%d", i), svc)
		c := testgrpc.NewTestServiceClient(conn)
		for j := range calls {
			want, cctx := svc+"-v1", ctx
			if j%2 == 1 {
				want, cctx = svc+"-v2", metadata.AppendToOutgoingContext(ctx, "x-version", "v2")
			}
			cctx, cancel := context.WithTimeout(cctx, 20*time.Second)
			resp, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatalf("iteration %d, call %d: %v", i, j, err)
			}
			if got := string(resp.GetPayload().GetBody()); got != want {
				t.Fatalf("iteration %d, call %d: served by %s, want %s", i, j, got, want)
			}
		}
		conn.Close()
	}
}
