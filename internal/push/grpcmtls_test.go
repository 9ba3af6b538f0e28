package push_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// issue signs a certificate for spiffe://cluster.local/ns/NS/sa/SA and
// returns it with its key, as PEM.
func issue(t *testing.T, a *ca.Authority, ns, sa string) (certPEM, keyPEM []byte) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k)
	if err != nil {
		t.Fatal(err)
	}
	is, err := a.Sign(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		ca.ID{TrustDomain: "cluster.local", Namespace: ns, Account: sa}, 0)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(k)
	return is.ChainPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// startTLSBackend is a grpc-go server requiring a client certificate of
// the mesh, serving with a certificate of identity ns/sa.
func startTLSBackend(t *testing.T, a *ca.Authority, name, ns, sa string) *backend {
	t.Helper()
	certPEM, keyPEM := issue(t, a, ns, sa)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.Bundle())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, addr: lis.Addr().(*net.TCPAddr), srv: grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert,
	})))}
	testgrpc.RegisterTestServiceServer(b.srv, b)
	go b.srv.Serve(lis)
	t.Cleanup(b.srv.Stop)
	return b
}

const mutualConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
`

// TestGRPCXDSClientMutualTLS: grpc-go's own xDS client, with its
// documented file_watcher certificate provider reading the files a
// workload's identity agent keeps, calls a service whose DestinationRule
// says ISTIO_MUTUAL: the cluster tells it to present its certificate and
// accept only servers of the service's namespace, so a server of another
// namespace, though signed by the same authority, is refused.
func TestGRPCXDSClientMutualTLS(t *testing.T) {
	ctx := context.Background()
	auth, err := ca.Generate(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	good := startTLSBackend(t, auth, "orders-1", "default", "orders")
	rogue := startTLSBackend(t, auth, "rogue-1", "billing", "orders")

	dir := t.TempDir()
	certPEM, keyPEM := issue(t, auth, "web", "frontend")
	for name, b := range map[string][]byte{"cert.pem": certPEM, "key.pem": keyPEM, "ca.pem": auth.Bundle()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	reg := registryWith(t, mutualConfig)
	reg.Upsert(good.instance("stable"))
	cp := startControlPlane(t, ctx, reg, nil)
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "web-1", "metadata": {"NAMESPACE": "default"}},
		"certificate_providers": {%q: {"plugin_name": "file_watcher", "config": {
			"certificate_file": %q, "private_key_file": %q, "ca_certificate_file": %q, "refresh_interval": "1s"}}}
	}`, cp.addr, xds.CertificateProvider, filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem"))
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///orders", grpc.WithResolvers(resolver), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := testgrpc.NewTestServiceClient(conn)
	if got, err := call(ctx, c, ""); err != nil || got != "orders-1" {
		t.Fatalf("mutual TLS call: %q, %v", got, err)
	}
	if good.calls.Load() == 0 {
		t.Fatal("the backend saw no call")
	}

	// Only the rogue server left: same authority, wrong namespace. The
	// client must refuse it (a handshake error), never call it.
	rogueInst := rogue.instance("stable")
	rogueInst.ID = good.name // replace the good instance in place
	reg.Upsert(rogueInst)
	deadline := time.Now().Add(20 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, last = c.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		cancel()
		if last != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if last == nil {
		t.Fatal("calls still succeed with only a server of another namespace")
	}
	if n := rogue.calls.Load(); n != 0 {
		t.Fatalf("the server of another namespace answered %d calls", n)
	}
	// grpc-go's own words for the check the cluster asked of it.
	if !strings.Contains(last.Error(), "spiffe://cluster.local/ns/billing/sa/orders") || !strings.Contains(last.Error(), "do not match any of the accepted SANs") {
		t.Fatalf("refused, but not by the SAN check: %v", last)
	}
}
