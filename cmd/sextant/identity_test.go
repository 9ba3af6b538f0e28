package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

// identityCLI runs a fresh "sextant identity" / "sextant acl" tree.
func identityCLI(ctx context.Context, args ...string) (string, error) {
	root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newIdentityCmd(), newACLCmd())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String() + errOut.String(), err
}

// loadIdentity reads an identity directory as a TLS certificate and a
// pool of the bundle's roots.
func loadIdentity(t *testing.T, dir string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	c, pool, err := readIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c, pool
}

// readIdentity reads cert.pem, key.pem and ca.pem. While an agent
// replaces them, a reader may see the new certificate with the old key
// (each file is replaced atomically, but two reads are two moments):
// like grpc-go's file_watcher, which keeps its previous pair and reads
// again at its next refresh, it tries again a few times.
func readIdentity(dir string) (tls.Certificate, *x509.CertPool, error) {
	var err error
	for range 20 {
		var c tls.Certificate
		if c, err = tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")); err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		b, rerr := os.ReadFile(filepath.Join(dir, "ca.pem"))
		if rerr != nil {
			return c, nil, rerr
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return c, nil, errors.New("ca.pem holds no certificate")
		}
		return c, pool, nil
	}
	return tls.Certificate{}, nil, err
}

// spiffeTLS is what a SPIFFE workload checks of its peer: the chain up to
// the bundle (peers are named by URI SANs, not host names).
func spiffeVerify(roots func() *x509.CertPool, usage x509.ExtKeyUsage) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		certs := make([]*x509.Certificate, len(raw))
		for i, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return err
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
}

// TestWorkloadIdentityEndToEnd: a real server with ACLs issues
// certificates to the CLI for the namespaces a token holds; two grpc-go
// workloads holding them talk mutual TLS and see each other's SPIFFE ID;
// a root rotation during calls fails none; a revoked token gets no more
// certificates; what is malformed is refused, naming it.
func TestWorkloadIdentityEndToEnd(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir, addr := t.TempDir(), freeAddr(t)
	srv := startServer(t, bin, dir, addr, "--acl", "--audit-log", "off", "--cert-max-ttl", "48h")
	defer func() { srv.Process.Kill(); srv.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn := []string{"--server", "http://" + addr}
	run := func(args ...string) (string, error) {
		t.Helper()
		return identityCLI(ctx, append(args, conn...)...)
	}
	out, err := run("acl", "bootstrap")
	if err != nil {
		t.Fatal(out, err)
	}
	admin := secretRE.FindStringSubmatch(out)[1]
	if out, err := run("acl", "policy", "create", "orders-id", "--rule", "orders:identity=write", "--token", admin); err != nil {
		t.Fatal(out, err)
	}
	out, err = run("acl", "token", "create", "--policy", "orders-id", "--token", admin)
	if err != nil {
		t.Fatal(out, err)
	}
	orders := secretRE.FindStringSubmatch(out)[1]

	work := t.TempDir()
	srvDir, cliDir := filepath.Join(work, "orders-api"), filepath.Join(work, "web")
	out, err = run("identity", "cert", "--namespace", "orders", "--service-account", "api", "--dir", srvDir, "--token", orders)
	if err != nil || !strings.Contains(out, "spiffe://cluster.local/ns/orders/sa/api") {
		t.Fatalf("identity cert: %v\n%s", err, out)
	}
	if st, err := os.Stat(filepath.Join(srvDir, "key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key.pem: %v, mode %v (want 0600)", err, st.Mode())
	}
	// The token holds orders, not web: refused, naming what it lacks.
	if out, err := run("identity", "cert", "--namespace", "web", "--service-account", "frontend", "--dir", cliDir, "--token", orders); err == nil ||
		!strings.Contains(err.Error(), `identity:write on namespace "web"`) {
		t.Fatalf("a certificate outside the token's namespaces: %v\n%s", err, out)
	}
	if out, err := run("identity", "cert", "--namespace", "web", "--service-account", "frontend", "--dir", cliDir, "--token", admin); err != nil {
		t.Fatal(out, err)
	}

	// The server workload: grpc-go over mutual TLS from the files, with
	// the client's identity read from the handshake.
	// It keeps the bundle it started with all along: a workload that has
	// not picked up a rotation yet.
	srvCert, srvRoots := loadIdentity(t, srvDir)
	creds := credentials.NewTLS(&tls.Config{
		Certificates:          []tls.Certificate{srvCert},
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: spiffeVerify(func() *x509.CertPool { return srvRoots }, x509.ExtKeyUsageClientAuth),
	})
	seen := make(chan string, 64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
				select {
				case seen <- ti.State.PeerCertificates[0].URIs[0].String():
				default:
				}
			}
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	defer gs.Stop()

	// call never calls t.Fatal: it runs on the calls' goroutine too.
	call := func(certDir string) error {
		cert, pool, err := readIdentity(certDir)
		if err != nil {
			return err
		}
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true,
			VerifyPeerCertificate: spiffeVerify(func() *x509.CertPool { return pool }, x509.ExtKeyUsageServerAuth),
		})))
		if err != nil {
			return err
		}
		defer cc.Close()
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		_, err = healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := call(cliDir); err != nil {
		t.Fatalf("mutual TLS call: %v", err)
	}
	if got := <-seen; got != "spiffe://cluster.local/ns/web/sa/frontend" {
		t.Fatalf("the server saw %q", got)
	}

	// Rotation under traffic: an agent keeps the client's files fresh;
	// calls run throughout; after the rotation the agent holds a
	// certificate of the new root, which the server, still on the old
	// bundle, verifies through the cross certificate sent with it, while
	// the client verifies the server's old certificate with the new
	// bundle (both roots are in it).
	agentDir := filepath.Join(work, "agent")
	actx, acancel := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() {
		_, err := identityCLI(actx, append([]string{"identity", "agent", "--namespace", "web", "--service-account", "frontend",
			"--dir", agentDir, "--check", "100ms", "--token", admin}, conn...)...)
		agentDone <- err
	}()
	defer func() { acancel(); <-agentDone }()
	waitTrue(t, 30*time.Second, func() bool { // the agent's first certificate
		_, err := os.Stat(filepath.Join(agentDir, "ca.pem"))
		return err == nil
	})
	firstIssuer := issuerOf(t, agentDir)
	stopCalls := make(chan struct{})
	callErrs := make(chan error, 1)
	go func() {
		// Bounded in count and time; stopped once the rotation is seen.
		deadline := time.Now().Add(2 * time.Minute)
		for n := 0; n < 2000 && time.Now().Before(deadline); n++ {
			select {
			case <-stopCalls:
				callErrs <- nil
				return
			default:
			}
			if err := call(agentDir); err != nil {
				callErrs <- err
				return
			}
		}
		callErrs <- nil
	}()
	if out, err := run("identity", "rotate", "--token", admin); err != nil || !strings.Contains(out, "signing") {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
	waitTrue(t, 30*time.Second, func() bool { return issuerOf(t, agentDir) != firstIssuer }) // the new root's
	// The agent replaces its files one at a time, the bundle after the
	// certificate (client.WriteIdentity): the bundle follows within
	// moments, longer on a loaded machine.
	roots := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(agentDir, "ca.pem"))
		if roots = bytes.Count(b, []byte("BEGIN CERTIFICATE")); roots == 2 || time.Now().After(deadline) {
			break
		}
	}
	if roots != 2 {
		t.Fatalf("the bundle after a rotation holds %d roots, want the new and the old", roots)
	}
	close(stopCalls)
	if err := <-callErrs; err != nil {
		t.Fatalf("a call failed during the rotation: %v", err)
	}
	if err := call(agentDir); err != nil {
		t.Fatalf("new client certificate to old server certificate: %v", err)
	}

	// The certificates the server signed, as the console lists them: the
	// orders token sees orders' only, the admin every namespace's.
	recent := func(token string) map[string]int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/identity/certificates", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Certificates []struct {
				Identity string    `json:"identity"`
				IssuedAt time.Time `json:"issuedAt"`
				NotAfter time.Time `json:"notAfter"`
			} `json:"certificates"`
			Since time.Time `json:"since"` // the list's start: the server's
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /v1/identity/certificates: %d %v", resp.StatusCode, err)
		}
		if out.Since.IsZero() || out.Since.After(time.Now()) {
			t.Fatalf("the list says it started at %v", out.Since)
		}
		for _, c := range out.Certificates {
			if c.IssuedAt.Before(out.Since) {
				t.Fatalf("%s issued at %v, before the list's start %v", c.Identity, c.IssuedAt, out.Since)
			}
		}
		got := map[string]int{}
		for _, c := range out.Certificates {
			if c.NotAfter.Before(time.Now()) {
				t.Fatalf("listed an expired certificate %+v", c)
			}
			got[c.Identity]++
		}
		return got
	}
	if got := recent(orders); len(got) != 1 || got["spiffe://cluster.local/ns/orders/sa/api"] != 1 {
		t.Fatalf("the orders token lists %v", got)
	}
	if got := recent(admin); got["spiffe://cluster.local/ns/web/sa/frontend"] < 3 || got["spiffe://cluster.local/ns/orders/sa/api"] != 1 {
		t.Fatalf("the admin lists %v (web/frontend: the cert, the agent's first and its renewal)", got)
	}

	// A revoked token gets no more certificates.
	var tokens struct {
		Tokens []struct {
			AccessorID string   `json:"accessor_id"`
			Policies   []string `json:"policies"`
		} `json:"tokens"`
	}
	out, err = run("acl", "token", "list", "-o", "json", "--token", admin)
	if err != nil {
		t.Fatal(out, err)
	}
	if err := json.Unmarshal([]byte(out), &tokens); err != nil {
		t.Fatal(err, out)
	}
	for _, tk := range tokens.Tokens {
		if len(tk.Policies) == 1 && tk.Policies[0] == "orders-id" {
			if out, err := run("acl", "token", "delete", tk.AccessorID, "--token", admin); err != nil {
				t.Fatal(out, err)
			}
		}
	}
	if out, err := run("identity", "cert", "--namespace", "orders", "--service-account", "api", "--dir", srvDir, "--token", orders); err == nil {
		t.Fatalf("a revoked token got a certificate:\n%s", out)
	}

	// Malformed requests: 400 naming the field.
	for _, c := range []struct{ body, field string }{
		{`{"namespace":"orders","serviceAccount":"api","csr":"not a csr"}`, "csr"},
		{`{"namespace":"orders","serviceAccount":"api"}`, "csr"},
		{`{"namespace":"Orders","serviceAccount":"api","csr":"x"}`, "namespace"},
		{`{"namespace":"orders","serviceAccount":"api","csr":"x","ttl":"soon"}`, "ttl"},
		{`{"namespace":"orders","serviceAccount":"api","csr":"x","extra":1}`, "extra"},
	} {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/identity/certificates", strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct{ Field, Message string }
		}
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 400 || e.Error.Field != c.field || e.Error.Message == "" {
			t.Errorf("%s: %d field %q %q, want 400 naming %q", c.body, resp.StatusCode, e.Error.Field, e.Error.Message, c.field)
		}
	}

	// A CA whose key is not its certificate's stops the server at start,
	// naming it.
	other := t.TempDir()
	writePEM := func(name, typ string, der []byte) string {
		p := filepath.Join(other, name)
		os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
		return p
	}
	agentCert, _ := loadIdentity(t, agentDir)
	srvKeyDER, _ := x509.MarshalPKCS8PrivateKey(srvCert.PrivateKey)
	caOut, err := exec.Command(bin, "server", "--data", t.TempDir(), "--http", freeAddr(t), "--xds", "",
		"--ca-cert", writePEM("ca.pem", "CERTIFICATE", agentCert.Certificate[0]), "--ca-key", writePEM("ca-key.pem", "PRIVATE KEY", srvKeyDER)).CombinedOutput()
	if err == nil || !bytes.Contains(caOut, []byte("does not match")) {
		t.Fatalf("a mismatched CA key: %v\n%s", err, caOut)
	}
}

func issuerOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return string(c.AuthorityKeyId)
}
