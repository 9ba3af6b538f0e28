package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"
)

// policyCLI runs a fresh command tree (identity, config, instances).
func policyCLI(ctx context.Context, args ...string) (string, error) {
	root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newIdentityCmd(), newConfigCmd(), newInstancesCmd())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String() + errOut.String(), err
}

// policyBootstrap is the bootstrap of docs/security.md's walkthrough.
func policyBootstrap(xdsAddr, node, ns, dir string) []byte {
	return fmt.Appendf(nil, `{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": %q, "metadata": {"NAMESPACE": %q}},
  "certificate_providers": {"sextant": {"plugin_name": "file_watcher", "config": {
    "certificate_file": %q, "private_key_file": %q, "ca_certificate_file": %q, "refresh_interval": "1s"}}},
  "server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%%s"}`,
		xdsAddr, node, ns, filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem"))
}

type policyTestServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (policyTestServer) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Hostname: "orders-1"}, nil
}

// TestPolicyEndToEnd runs docs/security.md's walkthrough against the real
// binary: identities kept by "sextant identity agent", policies applied
// with "sextant config apply", a grpc-go xDS server and grpc-go xDS
// clients, all proxyless. Under STRICT with an AuthorizationPolicy
// allowing web/frontend: frontend's calls succeed over mutual TLS,
// web/intruder gets PERMISSION_DENIED from grpc-go's RBAC, a plaintext
// client does not connect; an apply allowing the intruder is enforced
// within seconds; under PERMISSIVE without policies a plaintext client
// passes.
func TestPolicyEndToEnd(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir, addr, xdsAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	srv := startServer(t, bin, dir, addr, "--xds", xdsAddr)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn := []string{"--server", "http://" + addr}
	run := func(args ...string) string {
		t.Helper()
		out, err := policyCLI(ctx, append(args, conn...)...)
		if err != nil {
			t.Fatalf("sextant %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	work := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// Identities: agents keep the server's and frontend's files fresh.
	agent := func(ns, sa string) string {
		d := filepath.Join(work, ns+"-"+sa)
		actx, acancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := policyCLI(actx, append([]string{"identity", "agent", "--namespace", ns, "--service-account", sa, "--dir", d}, conn...)...)
			done <- err
		}()
		t.Cleanup(func() { acancel(); <-done })
		waitTrue(t, 30*time.Second, func() bool { _, err := os.Stat(filepath.Join(d, "ca.pem")); return err == nil })
		return d
	}
	ordersDir, frontendDir := agent("default", "orders"), agent("web", "frontend")
	intruderDir := filepath.Join(work, "web-intruder")
	run("identity", "cert", "--namespace", "web", "--service-account", "intruder", "--dir", intruderDir)

	// The server workload, registered where it listens.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
	run("instances", "register", "--service", "orders", "--host", "127.0.0.1", "--port", port, "--meta", "app=orders")
	out := run("config", "apply", "-f", write("policy.yaml", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: default}
spec:
  host: orders
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: orders, namespace: default}
spec:
  selector: {matchLabels: {app: orders}}
  action: ALLOW
  rules:
  - from: [{source: {principals: [cluster.local/ns/web/sa/frontend]}}]
    to: [{operation: {paths: ["/grpc.testing.TestService/*"]}}]
`))
	if !strings.Contains(out, "authorizationpolicy default/orders created") || !strings.Contains(out, "peerauthentication istio-system/default created") {
		t.Fatalf("config apply printed:\n%s", out)
	}

	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan error, 16)
	gs, err := grpcxds.NewGRPCServer(grpc.Creds(creds),
		grpcxds.BootstrapContentsForTesting(policyBootstrap(xdsAddr, "orders-1", "default", ordersDir)),
		grpcxds.ServingModeCallback(func(_ net.Addr, a grpcxds.ServingModeChangeArgs) {
			if a.Mode == connectivity.ServingModeServing {
				serving <- nil
			} else if a.Err != nil {
				serving <- a.Err
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	testgrpc.RegisterTestServiceServer(gs, policyTestServer{})
	go gs.Serve(lis)
	defer gs.Stop()
	select {
	case err := <-serving:
		if err != nil {
			t.Fatalf("the grpc-go xDS server is not serving: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the grpc-go xDS server got no listener in 30s")
	}

	client := func(node, idDir string) testgrpc.TestServiceClient {
		t.Helper()
		r, err := grpcxds.NewXDSResolverWithConfigForTesting(policyBootstrap(xdsAddr, node, "default", idDir))
		if err != nil {
			t.Fatal(err)
		}
		cc, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
		if err != nil {
			t.Fatal(err)
		}
		c, err := grpc.NewClient("xds:///orders", grpc.WithResolvers(r), grpc.WithTransportCredentials(cc))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return testgrpc.NewTestServiceClient(c)
	}
	call := func(c testgrpc.TestServiceClient) error {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		_, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		return err
	}
	frontend, intruder := client("web-frontend", frontendDir), client("web-intruder", intruderDir)
	// Eventually: the server's first listener waits for the apply (0.5 s
	// at most), which a loaded machine may exceed.
	waitTrue(t, 20*time.Second, func() bool { return call(frontend) == nil })
	// Eventually, as the frontend's first call: the listener may lag the
	// apply by a moment.
	deadline := time.Now().Add(20 * time.Second)
	last := call(intruder)
	for status.Code(last) != codes.PermissionDenied && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		last = call(intruder)
	}
	if status.Code(last) != codes.PermissionDenied {
		t.Fatalf("web/intruder: %v, want PermissionDenied from grpc-go's RBAC", last)
	}
	pc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	plain := testgrpc.NewTestServiceClient(pc)
	if err := call(plain); status.Code(err) != codes.Unavailable {
		t.Fatalf("a plaintext client under STRICT: %v, want Unavailable", err)
	}

	// The dry run names the server listener a change reaches; a selector
	// matching no instance is warned about.
	allowIntruder := write("allow-intruder.yaml", `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: orders, namespace: default}
spec:
  selector: {matchLabels: {app: orders}}
  rules:
  - from: [{source: {principals: [cluster.local/ns/web/sa/frontend, cluster.local/ns/web/sa/intruder]}}]
`)
	if out := run("config", "apply", "-f", allowIntruder, "--dry-run"); !strings.Contains(out, "authorizationpolicy default/orders configured (dry run)") ||
		!strings.Contains(out, "Listener grpc/server?xds.resource.listening_address=127.0.0.1:"+port) {
		t.Fatalf("dry run:\n%s", out)
	}
	if out := run("config", "apply", "-f", write("typo.yaml", `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: typo, namespace: default}
spec:
  selector: {matchLabels: {app: order}}
`), "--dry-run"); !strings.Contains(out, "warning: spec.selector: matches no registered instance") {
		t.Fatalf("dry run of a selector matching nothing:\n%s", out)
	}
	// A policy change is enforced within a bound.
	start := time.Now()
	run("config", "apply", "-f", allowIntruder)
	waitTrue(t, 20*time.Second, func() bool { return call(intruder) == nil })
	t.Logf("apply -> enforced by grpc-go's RBAC: %v", time.Since(start))

	// PERMISSIVE and no policy: plaintext passes.
	run("config", "apply", "-f", write("permissive.yaml", `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec:
  mtls: {mode: PERMISSIVE}
`))
	run("config", "delete", "authorizationpolicy/default/orders")
	waitTrue(t, 20*time.Second, func() bool { return call(plain) == nil })

	// Bad input is refused naming the field.
	if out, err := policyCLI(ctx, append([]string{"config", "apply", "-f", write("bad.yaml", `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: bad, namespace: default}
spec:
  rules: [{when: [{key: "connection.sni", values: [x]}]}]
`)}, conn...)...); err == nil || !strings.Contains(err.Error(), "spec.rules[0].when[0].key") || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("an unsupported condition: %v\n%s", err, out)
	}
}
