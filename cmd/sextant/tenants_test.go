package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// tenants is a server with ACLs on, a gateway serving TLS on tlsAddr
// (its token the bootstrap one), a writer token per team (instances,
// config and secrets of its own namespace only), and a service per team
// whose upstream answers the team's name.
type tenants struct {
	server, tlsAddr, proxy string
	tlsPort                int
	a, b                   string // team-a's and team-b's tokens
	admin                  string // the bootstrap token
	certs                  map[string]string
	dir                    string
	pool                   *x509.CertPool
}

func startTenants(t *testing.T) *tenants {
	t.Helper()
	ctx := context.Background()
	httpAddr, xdsAddr, proxy, admin, tlsAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	sctx, stopServer := context.WithCancel(ctx)
	serverDone := make(chan error, 1)
	data := t.TempDir()
	go func() {
		serverDone <- runServer(sctx, serverFlags{data: data, http: httpAddr, xds: xdsAddr, logFormat: "text",
			logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second, acl: true, auditLog: filepath.Join(data, "audit.log")})
	}()
	t.Cleanup(func() { stopServer(); <-serverDone })
	tn := &tenants{server: "http://" + httpAddr, tlsAddr: tlsAddr, proxy: proxy, certs: map[string]string{}, dir: t.TempDir(), pool: x509.NewCertPool()}
	fmt.Sscan(strings.TrimPrefix(tlsAddr, "127.0.0.1:"), &tn.tlsPort)
	anon, err := client.New(tn.server)
	if err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 10*time.Second, func() bool {
		resp, err := http.Get(tn.server + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	var boot struct {
		Secret string `json:"secret"`
	}
	if err := anon.Do(ctx, "POST", "/v1/acl/bootstrap", []byte(`{}`), &boot); err != nil || boot.Secret == "" {
		t.Fatalf("bootstrap: %v", err)
	}
	adm := anon.WithBearer(boot.Secret)
	tn.admin = boot.Secret
	for _, team := range []string{"team-a", "team-b"} {
		policy := fmt.Sprintf(`{"name":"%s-writer","rules":[{"namespace":"%s","instances":"write","config":"write","secret":"write"}]}`, team, team)
		if err := adm.Do(ctx, "POST", "/v1/acl/policies", []byte(policy), nil); err != nil {
			t.Fatal(err)
		}
		var tok struct {
			Secret string `json:"secret"`
		}
		if err := adm.Do(ctx, "POST", "/v1/acl/tokens", []byte(`{"policies":["`+team+`-writer"]}`), &tok); err != nil {
			t.Fatal(err)
		}
		if team == "team-a" {
			tn.a = tok.Secret
		} else {
			tn.b = tok.Secret
		}
		up := startUpstream(t, team)
		if _, err := anon.WithBearer(tok.Secret).Register(ctx, client.Instance{ID: team, Namespace: team, Service: "web", Host: "127.0.0.1", Port: up.addr.Port}); err != nil {
			t.Fatal(err)
		}
	}
	gctx, cancel := context.WithCancel(ctx)
	gatewayDone := make(chan error, 1)
	go func() {
		gatewayDone <- runGateway(gctx, gatewayFlags{xds: xdsAddr, listen: proxy, admin: admin, tlsListen: []string{tlsAddr},
			token: boot.Secret, data: filepath.Join(t.TempDir(), "gw"), node: "tenants-gw", service: "sextant-gateway",
			maxBody: 1 << 20, retainAge: time.Hour, retainBytes: 1 << 30, drain: time.Second, logFormat: "text", logLevel: "error"})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-gatewayDone; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	return tn
}

// apply runs `sextant config apply -f -` with token; dry adds --dry-run.
func (tn *tenants) apply(t *testing.T, token, yaml string, dry bool) (string, error) {
	t.Helper()
	args := []string{"config", "apply", "-f", "-", "--token", token}
	if dry {
		args = append(args, "--dry-run")
	}
	return runOn(t, tn.server, yaml, args...)
}

// secret creates TLS secret name in ns (a certificate for host) with token.
func (tn *tenants) secret(t *testing.T, token, ns, name, host string) {
	t.Helper()
	cert, key := testCert(t, tn.dir, ns+"-"+name, time.Now().Add(24*time.Hour), host)
	if out, err := runOn(t, tn.server, "", "secret", "create", "tls", name, "-n", ns, "--cert", cert, "--key", key, "--token", token); err != nil {
		t.Fatalf("secret create %s/%s: %v\n%s", ns, name, err, out)
	}
	pemBytes, _ := os.ReadFile(cert)
	tn.pool.AppendCertsFromPEM(pemBytes)
	tn.certs[ns+"/"+name] = cert
}

// call sends GET https://host/ to the gateway's TLS port with server name
// sni, and returns the status, the body and the certificate served (DER):
// which team answered, and whose certificate the gateway served.
func (tn *tenants) call(sni, host string, header map[string]string) (int, string, []byte, error) {
	return tn.callPath(sni, host, "/", header)
}

// callPath is call for path.
func (tn *tenants) callPath(sni, host, path string, header map[string]string) (int, string, []byte, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: tn.pool, ServerName: sni},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, tn.tlsAddr)
		}}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "https://"+sni+path, nil)
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.TLS.PeerCertificates[0].Raw, nil
}

// served reports whether the gateway's certificate is secret ns/name's.
func (tn *tenants) served(t *testing.T, leaf []byte, secret string) bool {
	t.Helper()
	b, _ := os.ReadFile(tn.certs[secret])
	blk, _ := pem.Decode(b)
	return blk != nil && string(blk.Bytes) == string(leaf)
}

// gatewayDoc is an HTTPS Gateway on port with hosts and credential cred,
// selecting the gateways labelled istio: ingressgateway.
func gatewayDoc(ns, name string, port int, hosts, cred string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: %s, namespace: %s}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: https, protocol: HTTPS}
    hosts: %s
    tls: {mode: SIMPLE, credentialName: %s}
`, name, ns, port, hosts, cred)
}

// vsDoc binds hosts of namespace ns to gateway gw, routing to its "web".
func vsDoc(ns, name, hosts, gw string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: %s, namespace: %s}
spec:
  hosts: %s
  gateways: [%s]
  http:
  - route: [{destination: {host: web}}]
`, name, ns, hosts, gw)
}

// TestTenantVirtualServiceBinding: team b's Gateway is open to every
// namespace (hosts "*"). Team a's writer binds a VirtualService to it for
// shop.example.com, which team b routes itself: team b's own
// VirtualService keeps the host (a Gateway's own namespace claims first);
// team a gets only a host team b does not route. Once team b's server
// says "./*" (its namespace only), team a's apply is warned that it does
// not bind, and the gateway routes none of its hosts; with team b's
// VirtualService gone, shop.example.com is not routed at all.
func TestTenantVirtualServiceBinding(t *testing.T) {
	tn := startTenants(t)
	tn.secret(t, tn.b, "team-b", "shop-cert", "shop.example.com")
	if out, err := tn.apply(t, tn.b, gatewayDoc("team-b", "shop-gw", tn.tlsPort, `["*"]`, "shop-cert")+"---\n"+
		vsDoc("team-b", "shop", "[shop.example.com]", "shop-gw"), false); err != nil {
		t.Fatalf("team b's apply: %v\n%s", err, out)
	}
	steal := vsDoc("team-a", "steal", "[shop.example.com, steal.example.com]", "team-b/shop-gw")
	if out, err := tn.apply(t, tn.a, steal, false); err != nil {
		t.Fatalf("team a's apply: %v\n%s", err, out)
	}
	answer := func(host string) (int, string) {
		code, body, _, err := tn.call("shop.example.com", host, nil)
		if err != nil {
			return 0, err.Error()
		}
		return code, body
	}
	// Team a's VirtualService is in force once steal.example.com routes.
	waitTrue(t, 15*time.Second, func() bool { code, body := answer("steal.example.com"); return code == 200 && body == "team-a" })
	if code, body := answer("shop.example.com"); code != 200 || body != "team-b" {
		t.Fatalf("shop.example.com on team b's Gateway: %d %q, want team-b's service", code, body)
	}

	if out, err := tn.apply(t, tn.b, gatewayDoc("team-b", "shop-gw", tn.tlsPort, `["./*"]`, "shop-cert"), false); err != nil {
		t.Fatalf("team b's ./*: %v\n%s", err, out)
	}
	out, err := tn.apply(t, tn.a, steal, false)
	if err != nil || !strings.Contains(out, "warning: spec.gateways[0]: Gateway team-b/shop-gw serves none of this VirtualService's hosts to namespace team-a (a server host ./h or ns/h serves h to one namespace only): it does not bind there") {
		t.Fatalf("team a's apply to a Gateway closed to it: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool { code, _ := answer("steal.example.com"); return code == 404 })
	if out, err := runOn(t, tn.server, "", "config", "delete", "vs/team-b/shop", "--token", tn.b); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool { code, _ := answer("shop.example.com"); return code == 404 })
}

// TestTenantGatewayClaim: team b's Gateway serves shop.example.com on the
// TLS port with team b's certificate. Team a's writer applying a Gateway
// for the same port and host with its own certificate is refused, by
// `config apply` and its --dry-run, naming team b's Gateway, the port and
// the host; the gateway keeps serving team b's certificate and service.
func TestTenantGatewayClaim(t *testing.T) {
	tn := startTenants(t)
	tn.secret(t, tn.b, "team-b", "shop-cert", "shop.example.com")
	tn.secret(t, tn.a, "team-a", "shop-cert", "shop.example.com")
	if out, err := tn.apply(t, tn.b, gatewayDoc("team-b", "shop-gw", tn.tlsPort, `[shop.example.com]`, "shop-cert")+"---\n"+
		vsDoc("team-b", "shop", "[shop.example.com]", "shop-gw"), false); err != nil {
		t.Fatalf("team b's apply: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool {
		code, body, _, err := tn.call("shop.example.com", "shop.example.com", nil)
		return err == nil && code == 200 && body == "team-b"
	})
	theirs := gatewayDoc("team-a", "shop-gw", tn.tlsPort, `[shop.example.com]`, "shop-cert") + "---\n" +
		vsDoc("team-a", "shop", "[shop.example.com]", "shop-gw")
	want := fmt.Sprintf(`port %d host "shop.example.com" is already served by Gateway team-b/shop-gw (spec.servers[0])`, tn.tlsPort)
	for _, dry := range []bool{true, false} {
		out, err := tn.apply(t, tn.a, theirs, dry)
		if err == nil || !strings.Contains(err.Error()+out, want) || !strings.Contains(err.Error()+out, "documents[0].spec.servers[0].hosts[0]") {
			t.Fatalf("team a's Gateway for team b's host (dry run %v): %v\n%s", dry, err, out)
		}
	}
	// Nothing of the refused apply was written: the VirtualService of the
	// same apply neither.
	if out, err := runOn(t, tn.server, "", "config", "list", "--namespace", "team-a", "--token", tn.a); err != nil || !strings.Contains(out, "no config objects") {
		t.Fatalf("team a's config after the refusal: %v\n%s", err, out)
	}
	code, body, leaf, err := tn.call("shop.example.com", "shop.example.com", nil)
	if err != nil || code != 200 || body != "team-b" || !tn.served(t, leaf, "team-b/shop-cert") {
		t.Fatalf("shop.example.com after team a's attempt: %d %q %v (team b's certificate: %v)", code, body, err, err == nil && tn.served(t, leaf, "team-b/shop-cert"))
	}
}

// TestTenantAuthorizationPolicyScope: team a (*.example.com) and team b
// (shop.example.com) each have a Gateway on the shared TLS port (both
// selecting istio: ingressgateway).
// Team a's AuthorizationPolicies selecting istio: ingressgateway judge
// team a's host only: a DENY of every call denies a.example.com and not
// team b's shop.example.com; an ALLOW requiring a header lets team b's
// calls through without it. A policy of the root namespace judges both.
func TestTenantAuthorizationPolicyScope(t *testing.T) {
	tn := startTenants(t)
	tn.secret(t, tn.b, "team-b", "shop-cert", "shop.example.com")
	tn.secret(t, tn.a, "team-a", "a-cert", "*.example.com")
	if out, err := tn.apply(t, tn.b, gatewayDoc("team-b", "shop-gw", tn.tlsPort, `[shop.example.com]`, "shop-cert")+"---\n"+
		vsDoc("team-b", "shop", "[shop.example.com]", "shop-gw"), false); err != nil {
		t.Fatalf("team b's apply: %v\n%s", err, out)
	}
	// Team a's wildcard covers shop.example.com too: team b's exact name
	// is routed (and judged) as team b's.
	if out, err := tn.apply(t, tn.a, gatewayDoc("team-a", "a-gw", tn.tlsPort, `["*.example.com"]`, "a-cert")+"---\n"+
		vsDoc("team-a", "a", `["*.example.com"]`, "a-gw"), false); err != nil {
		t.Fatalf("team a's apply: %v\n%s", err, out)
	}
	status := func(host string, header map[string]string) int {
		code, _, _, err := tn.call(host, host, header)
		if err != nil {
			return 0
		}
		return code
	}
	waitTrue(t, 15*time.Second, func() bool { return status("a.example.com", nil) == 200 && status("shop.example.com", nil) == 200 })
	if _, body, leaf, err := tn.call("shop.example.com", "shop.example.com", nil); err != nil || body != "team-b" || !tn.served(t, leaf, "team-b/shop-cert") {
		t.Fatalf("shop.example.com beside team a's *.example.com: %q %v", body, err)
	}

	deny := `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: lockdown, namespace: team-a}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{}]
`
	if out, err := tn.apply(t, tn.a, deny, false); err != nil {
		t.Fatalf("team a's DENY: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool { return status("a.example.com", nil) == 403 })
	if code := status("shop.example.com", nil); code != 200 {
		t.Fatalf("team b's host under team a's DENY policy: %d, want 200", code)
	}

	allow := `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: lockdown, namespace: team-a}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: ALLOW
  rules: [{when: [{key: "request.headers[x-team]", values: [a]}]}]
`
	if out, err := tn.apply(t, tn.a, allow, false); err != nil {
		t.Fatalf("team a's ALLOW: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool {
		return status("a.example.com", map[string]string{"x-team": "a"}) == 200 && status("a.example.com", nil) == 403
	})
	if code := status("shop.example.com", nil); code != 200 {
		t.Fatalf("team b's host under team a's ALLOW policy: %d, want 200", code)
	}

	// The root namespace's policy selecting the same labels judges every
	// namespace's Gateways (team a's ALLOW still judges team a's host).
	root := `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{to: [{operation: {paths: [/admin]}}]}]
`
	if out, err := tn.apply(t, tn.admin, root, false); err != nil {
		t.Fatalf("the root namespace's DENY: %v\n%s", err, out)
	}
	pathStatus := func(host, path string, header map[string]string) int {
		code, _, _, err := tn.callPath(host, host, path, header)
		if err != nil {
			return 0
		}
		return code
	}
	waitTrue(t, 15*time.Second, func() bool { return pathStatus("shop.example.com", "/admin", nil) == 403 })
	if code := pathStatus("a.example.com", "/admin", map[string]string{"x-team": "a"}); code != 403 {
		t.Fatalf("team a's host under the root namespace's DENY: %d, want 403", code)
	}
	if code := pathStatus("shop.example.com", "/", nil); code != 200 {
		t.Fatalf("team b's host outside the root namespace's DENY: %d, want 200", code)
	}
}
