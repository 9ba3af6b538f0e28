package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/secret/secrettest"
)

const secretTypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

// sdsGateway is a Gateway of namespace team-b whose HTTPS server's
// certificate is the secret team-b/shop-cert: the server publishes it by
// SDS.
const sdsGateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw, namespace: team-b}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: SIMPLE, credentialName: shop-cert}
`

// TestSDSSecretsNeedSecretRead runs the real server with --acl
// --acl-anonymous-read and asks SDS for team-b's gateway certificate over
// real ADS streams (grpc-go): an anonymous stream and one whose token holds
// *:*=read get no key (a delta stream is told the secret is absent); a
// token with secret:read on team-b gets the key, and the audit log names
// it and the secret. Anonymous HTTP may not list secrets.
func TestSDSSecretsNeedSecretRead(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr, xdsAddr := freeAddr(t), freeAddr(t)
	auditFile := filepath.Join(dir, "audit.json")
	srv := exec.Command(bin, "server", "--data", filepath.Join(dir, "data"), "--http", addr, "--xds", xdsAddr, "--log-level", "warn",
		"--acl", "--acl-anonymous-read", "--audit-log", auditFile)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() })
	waitTrue(t, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	ctx := context.Background()
	anon, err := client.New("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	var boot struct {
		Secret string `json:"secret"`
	}
	if err := anon.Do(ctx, "POST", "/v1/acl/bootstrap", []byte(`{}`), &boot); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	adm := anon.WithBearer(boot.Secret)
	certPEM, keyPEM := secrettest.Pair(t, time.Now().Add(24*time.Hour), "shop.example.com")
	if _, err := adm.PutSecret(ctx, client.TLSSecret{Namespace: "team-b", Name: "shop-cert", Cert: string(certPEM), Key: string(keyPEM)}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ApplyConfig(ctx, []byte(sdsGateway), false); err != nil {
		t.Fatal(err)
	}
	token := func(name, rules string) (secret, accessor string) {
		if err := adm.Do(ctx, "POST", "/v1/acl/policies", []byte(`{"name":"`+name+`","rules":`+rules+`}`), nil); err != nil {
			t.Fatal(err)
		}
		var tok struct {
			Secret   string `json:"secret"`
			Accessor string `json:"accessor_id"`
		}
		if err := adm.Do(ctx, "POST", "/v1/acl/tokens", []byte(`{"policies":["`+name+`"]}`), &tok); err != nil {
			t.Fatal(err)
		}
		return tok.Secret, tok.Accessor
	}
	reader, _ := token("read-all", `[{"namespace":"*","instances":"read","config":"read","placements":"read","push":"read","identity":"read"}]`)
	gw, gwAccessor := token("team-b-gateway", `[{"namespace":"*","push":"read"},{"namespace":"team-b","secret":"read"}]`)

	const name = "team-b/shop-cert"
	// The token the namespace granted gets the key.
	got := sdsSotW(t, xdsAddr, gw, "gw-1", name, 15*time.Second)
	if got == nil || !bytes.Contains(got.GetTlsCertificate().GetPrivateKey().GetInlineBytes(), []byte("PRIVATE KEY")) {
		t.Fatalf("a token with secret:read on team-b got %v, want the certificate and its key", got)
	}
	// The secret is published: the others are refused it, not early.
	for _, c := range []struct{ who, token string }{{"anonymous", ""}, {"*:*=read", reader}} {
		if got := sdsSotW(t, xdsAddr, c.token, "intruder", name, 2*time.Second); got != nil {
			t.Errorf("%s (state of the world) got secret %s with its key", c.who, got.GetName())
		}
		res, removed := sdsDelta(t, xdsAddr, c.token, name)
		if len(res) != 0 || len(removed) != 1 || removed[0] != name {
			t.Errorf("%s (delta): resources %v, removed %v; want none, and %s reported absent", c.who, res, removed, name)
		}
	}

	// Anonymous HTTP reads no secret metadata; the reader is refused too.
	var e *client.Error
	if _, err := anon.ListSecrets(ctx, ""); !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
		t.Errorf("anonymous GET /v1/secrets: %v, want 401", err)
	}
	if err := anon.Do(ctx, "GET", "/v1/secrets/team-b/shop-cert", nil, nil); !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
		t.Errorf("anonymous GET /v1/secrets/team-b/shop-cert: %v, want 401", err)
	}
	if _, err := anon.WithBearer(reader).ListSecrets(ctx, ""); !errors.As(err, &e) || e.Status != http.StatusForbidden {
		t.Errorf("*:*=read GET /v1/secrets: %v, want 403", err)
	}

	// One audit record per secret sent, naming the token, node and secret;
	// none for the streams refused it.
	var sent []map[string]any
	waitTrue(t, 10*time.Second, func() bool {
		sent = auditSent(t, auditFile)
		return len(sent) >= 1
	})
	rec := sent[0]
	if len(sent) != 1 || rec["accessor"] != gwAccessor || rec["node"] != "gw-1" || rec["secret"] != name || rec["namespace"] != "team-b" || rec["version"] == "" {
		t.Fatalf("audit records of secrets sent: %v; want one, for accessor %s, node gw-1, secret %s", sent, gwAccessor, name)
	}
}

// auditSent returns the audit file's records of secrets sent.
func auditSent(t *testing.T, file string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["result"] == "sent" {
			out = append(out, m)
		}
	}
	return out
}

func adsConn(t *testing.T, addr, token string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(acl.BearerToken{Token: token, Insecure: true}))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// sdsSotW asks for secret name on a state-of-the-world ADS stream and
// returns it if a response carries it within wait (nil otherwise).
func sdsSotW(t *testing.T, addr, token, node, name string, wait time.Duration) *tlsv3.Secret {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(adsConn(t, addr, token)).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: secretTypeURL, ResourceNames: []string{name}, Node: &corev3.Node{Id: node}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			// The server ends the stream at the deadline it was sent, and
			// grpc-go may report it before ctx's own timer has fired.
			if ctx.Err() == nil && status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("SDS stream: %v", err)
			}
			return nil
		}
		for _, a := range resp.Resources {
			var s tlsv3.Secret
			if err := a.UnmarshalTo(&s); err != nil {
				t.Fatal(err)
			}
			if s.Name == name {
				return &s
			}
		}
		stream.Send(&discoverygrpc.DiscoveryRequest{TypeUrl: secretTypeURL, ResourceNames: []string{name}, ResponseNonce: resp.Nonce, VersionInfo: resp.VersionInfo})
	}
}

// sdsDelta asks for secret name on a delta ADS stream and returns the
// first response's resources and removed names.
func sdsDelta(t *testing.T, addr, token, name string) (resources, removed []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(adsConn(t, addr, token)).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: secretTypeURL, ResourceNamesSubscribe: []string{name}, Node: &corev3.Node{Id: "intruder"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("delta SDS stream: %v", err)
	}
	for _, r := range resp.Resources {
		resources = append(resources, r.Name)
	}
	return resources, resp.RemovedResources
}
