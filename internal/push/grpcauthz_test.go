package push_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// identityDir writes the files "sextant identity agent" keeps for
// spiffe://cluster.local/ns/NS/sa/SA.
func identityDir(t *testing.T, a *ca.Authority, ns, sa string) string {
	t.Helper()
	dir := t.TempDir()
	certPEM, keyPEM := issue(t, a, ns, sa)
	for name, b := range map[string][]byte{"cert.pem": certPEM, "key.pem": keyPEM, "ca.pem": a.Bundle()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// xdsBootstrap is a proxyless gRPC workload's bootstrap: the control
// plane, its node, the certificate provider "sextant" over dir's files and
// the server listener template of docs/security.md.
func xdsBootstrap(cp, node, ns, dir string) []byte {
	return fmt.Appendf(nil, `{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "metadata": {"NAMESPACE": %q}},
		"certificate_providers": {%q: {"plugin_name": "file_watcher", "config": {
			"certificate_file": %q, "private_key_file": %q, "ca_certificate_file": %q, "refresh_interval": "1s"}}},
		"server_listener_resource_name_template": "grpc/server?xds.resource.listening_address=%%s"
	}`, cp, node, ns, xds.CertificateProvider, filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem"))
}

func applyYAML(t *testing.T, reg *pushtest.Registry, yaml string) {
	t.Helper()
	objs, err := config.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		reg.ApplyConfig(o)
	}
}

const strictOrders = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec: {mtls: {mode: STRICT}}
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
`

// TestGRPCXDSServerAuthorization: a grpc-go xDS server (xds.NewGRPCServer)
// and grpc-go xDS clients, all proxyless with file_watcher certificates,
// under a mesh-wide STRICT PeerAuthentication and an AuthorizationPolicy
// allowing web/frontend only: the allowed client's calls succeed over
// mutual TLS, another identity gets PERMISSION_DENIED from grpc-go's own
// RBAC, a plaintext client cannot connect; a policy change reaches the
// server within a bounded time; under PERMISSIVE a plaintext client
// passes (grpc-go serves PERMISSIVE as plaintext, see docs/security.md).
func TestGRPCXDSServerAuthorization(t *testing.T) {
	ctx := context.Background()
	auth, err := ca.Generate(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	reg := registryWith(t, mutualConfig)
	applyYAML(t, reg, strictOrders)
	cp := startControlPlane(t, ctx, reg, nil)

	// The server workload: registered at its listening address with label
	// app=orders, so that the policy's selector finds it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().(*net.TCPAddr)
	reg.Upsert(&instance.Instance{ID: "orders-1", Namespace: "default", Service: "orders", Host: "127.0.0.1", Port: addr.Port,
		Weight: 100, Healthy: true, Metadata: label.FromMap(map[string]string{"app": "orders"})})
	srvCreds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan error, 16)
	gs, err := grpcxds.NewGRPCServer(grpc.Creds(srvCreds),
		grpcxds.BootstrapContentsForTesting(xdsBootstrap(cp.addr, "orders-1", "default", identityDir(t, auth, "default", "orders"))),
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
	b := &backend{name: "orders-1"}
	testgrpc.RegisterTestServiceServer(gs, b)
	go gs.Serve(lis)
	defer gs.Stop()
	select {
	case err := <-serving:
		if err != nil {
			t.Fatalf("the xDS server is not serving: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the xDS server got no listener within 30s")
	}

	client := func(sa string) testgrpc.TestServiceClient {
		t.Helper()
		r, err := grpcxds.NewXDSResolverWithConfigForTesting(xdsBootstrap(cp.addr, "web-"+sa, "default", identityDir(t, auth, "web", sa)))
		if err != nil {
			t.Fatal(err)
		}
		creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient("xds:///orders", grpc.WithResolvers(r), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return testgrpc.NewTestServiceClient(conn)
	}
	unary := func(c testgrpc.TestServiceClient) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		return err
	}
	// until polls f until it reports true, for at most 20s; it returns
	// how long that took.
	until := func(what string, f func() (bool, error)) time.Duration {
		t.Helper()
		start := time.Now()
		var last error
		for time.Since(start) < 20*time.Second {
			ok, err := f()
			if ok {
				return time.Since(start)
			}
			last = err
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: not within 20s (last: %v)", what, last)
		return 0
	}
	frontend, intruder := client("frontend"), client("intruder")
	if err := unary(frontend); err != nil {
		t.Fatalf("web/frontend, allowed: %v", err)
	}
	if err := unary(intruder); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("web/intruder, not allowed: %v, want PermissionDenied from grpc-go's RBAC", err)
	}
	// A plaintext client cannot even connect under STRICT.
	plain, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plainClient := testgrpc.NewTestServiceClient(plain)
	if err := unary(plainClient); status.Code(err) != codes.Unavailable {
		t.Fatalf("a plaintext client under STRICT: %v, want Unavailable (no handshake)", err)
	}

	// The policy now allows the intruder too: enforced within a bound.
	applyYAML(t, reg, strings.Replace(strictOrders, "principals: [cluster.local/ns/web/sa/frontend]", "principals: [cluster.local/ns/web/sa/frontend, cluster.local/ns/web/sa/intruder]", 1))
	took := until("the intruder allowed", func() (bool, error) { err := unary(intruder); return err == nil, err })
	t.Logf("policy change enforced by grpc-go after %v", took)
	// A DENY policy on one method wins over the ALLOW.
	applyYAML(t, reg, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-unary, namespace: default}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: [/grpc.testing.TestService/UnaryCall]}}], from: [{source: {namespaces: [web]}}]}]
`)
	until("the DENY policy", func() (bool, error) {
		err := unary(frontend)
		return status.Code(err) == codes.PermissionDenied, err
	})
	if _, err := frontend.EmptyCall(ctx, &testgrpc.Empty{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("EmptyCall, allowed and not denied: %v, want Unimplemented from the handler", err)
	}

	// PERMISSIVE, no policy: a plaintext client gets through.
	applyYAML(t, reg, `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec: {mtls: {mode: PERMISSIVE}}
`)
	reg.DeleteConfig(config.Key{Kind: config.KindAuthorizationPolicy, Namespace: "default", Name: "orders"})
	reg.DeleteConfig(config.Key{Kind: config.KindAuthorizationPolicy, Namespace: "default", Name: "no-unary"})
	until("a plaintext call under PERMISSIVE", func() (bool, error) { err := unary(plainClient); return err == nil, err })

	// RequestAuthentication: grpc-go does not implement jwt_authn. The
	// filter is published optional, so grpc-go takes the listener (a NACK
	// would keep the old one, which lets the call through) and skips it;
	// its RBAC never matches a metadata matcher (docs/security.md): an
	// ALLOW rule needing a request principal denies every call (closed), a
	// DENY rule needing a claim denies none (open).
	applyYAML(t, reg, `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: default}
spec:
  jwtRules: [{issuer: iss, jwksUri: "http://127.0.0.1:1/jwks"}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: jwt-only, namespace: default}
spec:
  rules: [{from: [{source: {requestPrincipals: ["*"]}}]}]
`)
	until("requestPrincipals on grpc-go: closed", func() (bool, error) {
		err := unary(plainClient)
		return status.Code(err) == codes.PermissionDenied, err
	})
	reg.DeleteConfig(config.Key{Kind: config.KindAuthorizationPolicy, Namespace: "default", Name: "jwt-only"})
	applyYAML(t, reg, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-free, namespace: default}
spec:
  action: DENY
  rules: [{when: [{key: "request.auth.claims[tier]", values: [free]}]}]
`)
	until("a claim DENY on grpc-go: open", func() (bool, error) { err := unary(plainClient); return err == nil, err })
}
