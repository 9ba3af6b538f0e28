package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// cliAt runs a fresh command tree with args (talking to a real server) and
// returns stdout, stderr and the error.
func cliAt(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newInstancesCmd(), newServicesCmd(), newACLCmd(), newConfigCmd())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

var secretRE = regexp.MustCompile(`SecretID:\s+(sxt_\S+)`)

// TestCLIOverMutualTLS drives the ACL and instance commands against the
// real stack with ACLs on and mutual TLS, certificates made in the test.
func TestCLIOverMutualTLS(t *testing.T) {
	certs := apitest.NewCerts(t)
	srv := apitest.StartWith(t, apitest.Options{ACL: acl.Options{Enabled: true}, TLS: certs.ServerTLS(true)})
	conn := []string{"--server", srv.URL, "--ca-file", certs.CAFile, "--cert-file", certs.ClientCert, "--key-file", certs.ClientKey}
	run := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := cliAt(t, append(args, conn...)...)
		return out, err
	}
	out, err := run("acl", "bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	m := secretRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("bootstrap printed no secret:\n%s", out)
	}
	admin := m[1]
	if _, err := run("acl", "bootstrap"); err == nil || !strings.Contains(err.Error(), "already bootstrapped") {
		t.Fatalf("second bootstrap: %v", err)
	}
	if _, err := run("acl", "policy", "create", "orders-w", "--rule", "orders:instances=write", "--token", admin); err != nil {
		t.Fatal(err)
	}
	out, err = run("acl", "token", "create", "--policy", "orders-w", "--description", "deployer", "--token", admin)
	if err != nil {
		t.Fatal(err)
	}
	writer := secretRE.FindStringSubmatch(out)[1]
	// The token from the environment, as users are told to pass it.
	t.Setenv("SEXTANT_TOKEN", writer)
	if _, err := run("instances", "register", "--namespace", "orders", "--service", "api", "--host", "10.0.0.1", "--port", "80"); err != nil {
		t.Fatal(err)
	}
	_, err = run("instances", "register", "--namespace", "billing", "--service", "api", "--host", "10.0.0.1", "--port", "80")
	if err == nil || !strings.Contains(err.Error(), "403 permission_denied") || !strings.Contains(err.Error(), `instances:write on namespace "billing"`) {
		t.Fatalf("write to another namespace: %v", err)
	}
	out, err = run("instances", "list", "--namespace", "orders")
	if err != nil || !strings.Contains(out, "10.0.0.1:80") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, err = run("acl", "token", "list", "--token", admin)
	if err != nil || !strings.Contains(out, "deployer") || strings.Contains(out, writer[len(writer)-64:]) {
		t.Fatalf("token list: %v\n%s", err, out)
	}
	if out, err = run("acl", "policy", "get", "orders-w", "--token", admin); err != nil || !strings.Contains(out, `"instances": "write"`) {
		t.Fatalf("policy get: %v\n%s", err, out)
	}
	acc := regexp.MustCompile(`(?m)^([0-9a-f]{24})\s+orders-w`).FindStringSubmatch(mustRun(t, run, "acl", "token", "list", "--token", admin))
	if acc == nil {
		t.Fatal("token list lacks the orders-w token")
	}
	if _, err := run("acl", "token", "delete", acc[1], "--token", admin); err != nil {
		t.Fatal(err)
	}
	if _, err := run("instances", "list"); err == nil || !strings.Contains(err.Error(), "401 unauthenticated") {
		t.Fatalf("revoked token: %v", err)
	}
	// Without the client certificate the server refuses the connection;
	// without the CA the CLI refuses the server.
	if _, _, err := cliAt(t, "instances", "list", "--server", srv.URL, "--ca-file", certs.CAFile); err == nil {
		t.Fatal("mutual TLS answered a CLI without a client certificate")
	}
	_, _, err = cliAt(t, "instances", "list", "--server", srv.URL, "--cert-file", certs.ClientCert, "--key-file", certs.ClientKey)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without --ca-file: %v", err)
	}
	if _, err := run("acl", "policy", "delete", "orders-w", "--token", admin); err != nil {
		t.Fatal(err)
	}
}

func mustRun(t *testing.T, run func(...string) (string, error), args ...string) string {
	t.Helper()
	out, err := run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestServerSecurityFlags runs the real binary with --acl and TLS: tokens
// survive a restart, and a non-loopback address without TLS or ACLs is
// warned about.
func TestServerSecurityFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	certs := apitest.NewCerts(t)
	dir := t.TempDir()
	addr, xdsAddr := freeAddr(t), freeAddr(t)
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "server", "--data", dir, "--http", addr, "--xds", xdsAddr, "--log-level", "warn", "--acl",
			"--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--audit-log", dir+"/audit.json")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, _, err := cliAt(t, "acl", "policy", "list", "--server", "https://"+addr, "--ca-file", certs.CAFile); err != nil && strings.Contains(err.Error(), "401") {
				return cmd
			}
			time.Sleep(50 * time.Millisecond)
		}
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("server not ready in 30s")
		return nil
	}
	stop := func(cmd *exec.Cmd) {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("server exit: %v", err)
		}
	}
	conn := []string{"--server", "https://" + addr, "--ca-file", certs.CAFile}
	srv := start()
	out, _, err := cliAt(t, append([]string{"acl", "bootstrap"}, conn...)...)
	if err != nil {
		stop(srv)
		t.Fatal(err)
	}
	admin := secretRE.FindStringSubmatch(out)[1]
	if _, _, err := cliAt(t, append([]string{"instances", "register", "--service", "a", "--host", "10.0.0.1", "--port", "80", "--token", admin}, conn...)...); err != nil {
		stop(srv)
		t.Fatal(err)
	}
	stop(srv)
	srv = start()
	out, _, err = cliAt(t, append([]string{"instances", "list", "--token", admin}, conn...)...)
	if err != nil || !strings.Contains(out, "10.0.0.1:80") {
		stop(srv)
		t.Fatalf("after restart: %v\n%s", err, out)
	}
	// xDS over TLS needs a token with push:read on every namespace.
	if _, _, err := cliAt(t, append([]string{"acl", "policy", "create", "orders-push", "--rule", "orders:push=read", "--token", admin}, conn...)...); err != nil {
		stop(srv)
		t.Fatal(err)
	}
	out, _, err = cliAt(t, append([]string{"acl", "token", "create", "--policy", "orders-push", "--token", admin}, conn...)...)
	if err != nil {
		stop(srv)
		t.Fatal(err)
	}
	narrow := secretRE.FindStringSubmatch(out)[1]
	for _, c := range []struct {
		token string
		want  codes.Code
	}{{"", codes.Unauthenticated}, {narrow[:len(narrow)-1] + "x", codes.Unauthenticated}, {narrow, codes.PermissionDenied}, {admin, codes.OK}} {
		if got := adsCode(t, xdsAddr, certs, c.token); got != c.want {
			t.Errorf("ADS with token %q...: %v, want %v", c.token[:min(len(c.token), 8)], got, c.want)
		}
	}
	// The control plane's commands carry the token and the CA too.
	root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newPushCmd())
	var pout bytes.Buffer
	root.SetOut(&pout)
	root.SetArgs(append([]string{"push", "status", "--token", admin}, conn...))
	if err := root.Execute(); err != nil || !strings.Contains(pout.String(), "revision") {
		t.Errorf("push status with the admin token: %v\n%s", err, pout.String())
	}
	root.SetArgs(append([]string{"push", "status", "--token", narrow}, conn...))
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "403 permission_denied") {
		t.Errorf("push status with a namespace's token: %v", err)
	}
	stop(srv)
	audit, err := os.ReadFile(dir + "/audit.json")
	if err != nil || !bytes.Contains(audit, []byte(`"op":"POST /v1/instances"`)) || bytes.Contains(audit, []byte(admin[len(admin)-64:])) {
		t.Fatalf("audit file (%v):\n%s", err, audit)
	}

	// The warning: an address beyond loopback, no TLS, no ACLs.
	cmd := exec.Command(bin, "server", "--data", t.TempDir(), "--http", "0.0.0.0:0", "--xds", "", "--log-level", "warn")
	var stderr syncWriter
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && !(strings.Contains(stderr.String(), "without TLS") && strings.Contains(stderr.String(), "without ACLs")) {
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if s := stderr.String(); !strings.Contains(s, "without TLS") || !strings.Contains(s, "without ACLs") {
		t.Fatalf("no warning for 0.0.0.0 without TLS and ACLs:\n%s", s)
	}
}

// syncWriter collects a child's stderr while the test reads it.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// adsCode opens an ADS stream over TLS with token (none if "") and asks for
// clusters: the status code of the first answer (OK for a response, or no
// answer within a second that is not a refusal).
func adsCode(t *testing.T, addr string, certs *apitest.Certs, token string) codes.Code {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(certs.ClientTLS(false)))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(acl.BearerToken{Token: token}))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return status.Code(err)
	}
	// A refused stream may end before the request is sent (io.EOF from
	// Send): its status comes with Recv either way.
	_ = stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Node: &corev3.Node{Id: "test"}})
	_, err = stream.Recv()
	if c := status.Code(err); c == codes.DeadlineExceeded {
		return codes.OK // no refusal: the stream is open, with nothing to send yet
	} else {
		return c
	}
}
