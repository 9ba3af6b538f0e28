package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
	api, _, xdsAddr := startServerXDSURL(t)
	return api, xdsAddr
}

// startServerXDSURL is startServerXDS with the server's base URL too.
func startServerXDSURL(t *testing.T) (*client.Client, string, string) {
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
	return api, "http://" + httpAddr, xdsAddr
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
	// Registry churn beside the applies: another service's instances come
	// and go all along (bounded in count), so that the endpoint path and
	// new services' config rounds are busy while each apply is answered.
	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := make(chan int, 1)
	go func() {
		n := 0
		defer func() { churned <- n }()
		for ; n < 5000 && churnCtx.Err() == nil; n++ {
			in := client.Instance{ID: fmt.Sprintf("churn-%d", n%20), Service: fmt.Sprintf("churn%d", n%7), Host: "127.0.0.1", Port: 9000 + n%20}
			if n%40 >= 20 {
				api.Deregister(churnCtx, in.ID)
				continue
			}
			api.Register(churnCtx, in)
		}
	}()
	defer func() {
		stopChurn()
		t.Logf("%d registry changes beside the applies", <-churned)
	}()
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

// TestConfigApplyWait: "config apply --wait" (and "config delete --wait")
// returns once every connected subscriber (here grpc-go's xDS client) has
// ACKed the applied config; a
// subscriber that never answers makes it print who is behind and fail at
// --timeout.
func TestConfigApplyWait(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, grpc-go over xDS, the CLI")
	}
	ctx := context.Background()
	api, url, xdsAddr := startServerXDSURL(t)
	for _, v := range []string{"v1", "v2"} {
		_, port := startGreeter(t, "shop-"+v, false)
		if _, err := api.Register(ctx, client.Instance{ID: "shop-" + v, Service: "shop", Host: "127.0.0.1", Port: port,
			Protocol: "grpc", Metadata: map[string]string{"version": v}}); err != nil {
			t.Fatal(err)
		}
	}
	conn := dialXDS(t, xdsAddr, "waited-client", "shop")
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := testgrpc.NewTestServiceClient(conn).UnaryCall(cctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	out, err := runOn(t, url, subsetsConfig("shop"), "config", "apply", "-f", "-", "--wait", "--timeout", "20s")
	if err != nil {
		t.Fatalf("apply --wait: %v\n%s", err, out)
	}
	if !strings.Contains(out, "ACKed by all 1 subscribers") {
		t.Fatalf("apply --wait printed:\n%s", out)
	}
	// The routes the client ACKed send x-version: v2 to v2.
	md := metadata.AppendToOutgoingContext(cctx, "x-version", "v2")
	if body, err := callSettled(md, conn, "shop-v2"); err != nil || body != "shop-v2" {
		t.Fatalf("after apply --wait: %q %v, want shop-v2", body, err)
	}

	// The same config again after a write of a kind the control plane does
	// not follow (a node): unchanged, nothing to publish, answered at once.
	if _, err := api.ApplyNodes(ctx, []byte(`{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
		"status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}}}`)); err != nil {
		t.Fatal(err)
	}
	again := time.Now()
	res, err := api.ApplyConfig(ctx, []byte(subsetsConfig("shop")), false)
	if err != nil || res.Published == nil || !*res.Published || time.Since(again) > 5*time.Second {
		t.Fatalf("unchanged apply: %+v %v after %v", res, err, time.Since(again))
	}

	// "config delete --wait" returns once the client ACKed routes without
	// the VirtualService: x-version: v2 no longer pins calls to v2.
	out, err = runOn(t, url, "", "config", "delete", "vs/shop", "--wait", "--timeout", "20s")
	if err != nil || !strings.Contains(out, "deleted virtualservice default/shop") || !strings.Contains(out, "ACKed by all 1 subscribers") {
		t.Fatalf("delete --wait: %v\n%s", err, out)
	}
	if body, err := callSettled(md, conn, "shop-v1"); err != nil || body != "shop-v1" {
		t.Fatalf("after delete --wait, x-version: v2 calls still all went to v2: %q %v", body, err)
	}

	// A subscriber that asks for every cluster and never ACKs.
	xc, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer xc.Close()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(xc).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: &corev3.Node{Id: "silent"},
		TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err = runOn(t, url, strings.ReplaceAll(subsetsConfig("shop"), "exact: v2", "exact: two"), "config", "apply", "-f", "-", "--wait", "--timeout", "1s")
	if err == nil || !strings.Contains(err.Error(), "not ACKed by every subscriber within 1s") {
		t.Fatalf("apply --wait with a silent subscriber: %v\n%s", err, out)
	}
	if !strings.Contains(out, "behind: silent (") || strings.Contains(out, "behind: waited-client") {
		t.Fatalf("apply --wait should name the silent subscriber alone:\n%s", out)
	}
	t.Logf("apply --wait with a silent subscriber:\n%s", out)
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("apply --wait --timeout 1s took %v", took)
	}
}

// callSettled calls until the answer's body is want, for at most 10 s,
// trying again only on a wrong body or grpc-go's "unknown cluster selected
// for RPC". grpc-go ACKs a route configuration before its ClientConn uses
// it: the resolver hands it over through a serializer, and the balancer
// gets the clusters it names after that (see internal/push's settle). So a
// call just after "--wait" returned may still take the old routes; --wait
// itself is checked by the silent subscriber below, which it must wait for.
func callSettled(ctx context.Context, conn *grpc.ClientConn, want string) (string, error) {
	for until := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := testgrpc.NewTestServiceClient(conn).UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		body := string(resp.GetPayload().GetBody())
		retry := err == nil && body != want || err != nil && strings.Contains(err.Error(), "unknown cluster selected for RPC")
		if !retry || time.Now().After(until) {
			return body, err
		}
	}
}
