package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestIdentityAgentServesSDS runs "sextant identity agent --sds
// unix://PATH" against the real server and asks the socket for "default"
// and "ROOTCA" with grpc-go's SDS client (SecretDiscoveryService
// StreamSecrets, as Envoy asks istio-agent): the certificate is the
// workload's SPIFFE ID, its key matches, it verifies with ROOTCA, and the
// socket is 0600. Bad --sds values are refused naming the flag.
func TestIdentityAgentServesSDS(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: the real server and the agent")
	}
	_, url, _ := startServerXDSURL(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "sds.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out bytes.Buffer
	cmd := newIdentityCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"agent", "--server", url, "--namespace", "shop", "--service-account", "web", "--dir", filepath.Join(dir, "id"), "--sds", "unix://" + sock})
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v\n%s", err, out.String())
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("the socket outlived the agent: %v", err)
		}
	})
	waitTrue(t, 30*time.Second, func() bool { _, err := os.Stat(sock); return err == nil })
	if fi, _ := os.Stat(sock); fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	stream, err := secretv3.NewSecretDiscoveryServiceClient(conn).StreamSecrets(sctx)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{xds.CertificateName, xds.RootCertName}
	node := &corev3.Node{Id: "sidecar~127.0.0.1~web-1.shop~shop.svc.cluster.local", UserAgentName: "envoy"}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{Node: node, TypeUrl: xds.TypeSecret.URL(), ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]*tlsv3.Secret{}
	for len(secrets) < 2 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("SDS over %s: %v", sock, err)
		}
		for _, a := range r.Resources {
			s := &tlsv3.Secret{}
			if err := a.UnmarshalTo(s); err != nil {
				t.Fatal(err)
			}
			secrets[s.Name] = s
		}
		stream.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: xds.TypeSecret.URL(), ResourceNames: names, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	}
	tc := secrets[xds.CertificateName].GetTlsCertificate()
	pair, err := tls.X509KeyPair(tc.GetCertificateChain().GetInlineBytes(), tc.GetPrivateKey().GetInlineBytes())
	if err != nil {
		t.Fatalf("default: %v", err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/ns/shop/sa/web" {
		t.Errorf("default's identity: %v", leaf.URIs)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secrets[xds.RootCertName].GetValidationContext().GetTrustedCa().GetInlineBytes()) {
		t.Fatal("ROOTCA holds no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range pair.Certificate[1:] {
		if ic, err := x509.ParseCertificate(c); err == nil {
			inter.AddCert(ic)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("default does not verify with ROOTCA: %v", err)
	}
	// The same files are in --dir, as without --sds.
	if b, err := os.ReadFile(filepath.Join(dir, "id", "cert.pem")); err != nil || !bytes.Equal(b, tc.GetCertificateChain().GetInlineBytes()) {
		t.Errorf("cert.pem and SDS's default differ: %v", err)
	}

	for _, bad := range []string{"/tmp/x.sock", "unix://", "tcp://127.0.0.1:1"} {
		if _, err := parseSDSAddr(bad); err == nil || !strings.Contains(err.Error(), "--sds") {
			t.Errorf("--sds %q: %v, want an error naming --sds", bad, err)
		}
	}
}
