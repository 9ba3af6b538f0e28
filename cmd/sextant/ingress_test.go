package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/debian"
)

const istioGateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %[1]d, name: https, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: SIMPLE, credentialName: shop-cert, minProtocolVersion: TLSV1_2}
  - port: {number: %[2]d, name: http, protocol: HTTP}
    hosts: [shop.example.com]
    tls: {httpsRedirect: true}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [shop-gw]
  http:
  - route: [{destination: {host: orders}}]
`

// TestIstioGatewayEndToEnd: a TLS secret (sextant secret create tls), an
// Istio Gateway with an HTTPS server and an HTTP one redirecting to it, and
// a VirtualService bound to the Gateway, applied to a real server, make a
// real gateway serve HTTPS for the host (curl, HTTP/2) with the secret's
// certificate by SDS, redirect plain HTTP with 301, and serve a rotated
// certificate to new connections.
func TestIstioGatewayEndToEnd(t *testing.T) {
	tlsAddr := freeAddr(t)
	api, proxy, _, server := startMeshTLS(t, tlsAddr)
	ctx := context.Background()
	up := startUpstream(t, "orders-1")
	if _, err := api.Register(ctx, client.Instance{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: up.addr.Port}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key := testCert(t, dir, "shop", time.Now().Add(24*time.Hour), "shop.example.com")
	if out, err := runOn(t, server, "", "secret", "create", "tls", "shop-cert", "--cert", cert, "--key", key); err != nil {
		t.Fatalf("secret create: %v\n%s", err, out)
	}
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	_, plainPort, _ := net.SplitHostPort(proxy)
	var tp, pp int
	fmt.Sscan(tlsPort, &tp)
	fmt.Sscan(plainPort, &pp)
	if out, err := runOn(t, server, fmt.Sprintf(istioGateway, tp, pp), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}

	pool := x509.NewCertPool()
	pemBytes, _ := os.ReadFile(cert)
	pool.AppendCertsFromPEM(pemBytes)
	newClient := func() *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "shop.example.com"},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, tlsAddr)
			}}}
	}
	var body string
	waitTrue(t, 15*time.Second, func() bool {
		resp, err := newClient().Get("https://shop.example.com/buy")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return resp.StatusCode == 200 && resp.ProtoMajor == 2
	})
	if body != "orders-1" {
		t.Fatalf("https: %q", body)
	}
	if curl, err := debian.Ensure("curl", "curl"); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := exec.CommandContext(cctx, curl, "-sS", "--http2", "--cacert", cert, "--resolve", "shop.example.com:"+tlsPort+":127.0.0.1",
			"-w", " %{http_version}", "https://shop.example.com:"+tlsPort+"/").CombinedOutput()
		cancel()
		if err != nil || string(out) != "orders-1 2" {
			t.Errorf("curl: %v: %q", err, out)
		}
	}

	// httpsRedirect on the plaintext server.
	req, _ := http.NewRequest("GET", "http://"+proxy+"/buy?x=1", nil)
	req.Host = "shop.example.com"
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "https://shop.example.com/buy?x=1" {
		t.Errorf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	// Rotation: the secret replaced, a new connection sees the new certificate.
	cert2, key2 := testCert(t, dir, "shop2", time.Now().Add(48*time.Hour), "shop.example.com")
	if out, err := runOn(t, server, "", "secret", "create", "tls", "shop-cert", "--cert", cert2, "--key", key2, "--replace"); err != nil {
		t.Fatalf("secret rotate: %v\n%s", err, out)
	}
	pem2, _ := os.ReadFile(cert2)
	pool.AppendCertsFromPEM(pem2)
	waitTrue(t, 15*time.Second, func() bool {
		resp, err := newClient().Get("https://shop.example.com/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].NotAfter.After(time.Now().Add(47 * time.Hour))
	})

	// A Gateway the gateway cannot serve is refused at apply, naming the
	// field: AUTO_PASSTHROUGH needs protocol TLS, not HTTPS.
	bad := strings.Replace(fmt.Sprintf(istioGateway, tp, pp), "mode: SIMPLE", "mode: AUTO_PASSTHROUGH", 1)
	if out, err := runOn(t, server, bad, "config", "apply", "-f", "-"); err == nil || !strings.Contains(out+err.Error(), "spec.servers[0].tls.mode") {
		t.Errorf("AUTO_PASSTHROUGH: %v\n%s", err, out)
	}

	// OPTIONAL_MUTUAL: a client certificate is verified when given: none
	// passes, the CA's passes, another CA's fails the handshake.
	caCert, caKey := testCert(t, dir, "clients", time.Now().Add(24*time.Hour), "client")
	cert3, key3 := testCert(t, dir, "shop3", time.Now().Add(24*time.Hour), "shop.example.com")
	if out, err := runOn(t, server, "", "secret", "create", "tls", "shop-cert", "--cert", cert3, "--key", key3, "--ca", caCert, "--replace"); err != nil {
		t.Fatalf("secret with a CA: %v\n%s", err, out)
	}
	pem3, _ := os.ReadFile(cert3)
	pool.AppendCertsFromPEM(pem3)
	optional := strings.Replace(fmt.Sprintf(istioGateway, tp, pp), "mode: SIMPLE", "mode: OPTIONAL_MUTUAL", 1)
	if out, err := runOn(t, server, optional, "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("OPTIONAL_MUTUAL: %v\n%s", err, out)
	}
	withCert := func(certFile, keyFile string) *http.Client {
		c := newClient()
		if certFile != "" {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{pair}
		}
		return c
	}
	status := func(c *http.Client) (int, error) {
		resp, err := c.Get("https://shop.example.com/")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	otherCert, otherKey := testCert(t, dir, "other", time.Now().Add(24*time.Hour), "client")
	// The new chain is in force once the CA's client certificate is
	// served and another CA's is refused (the SIMPLE chain before it asks
	// for none and serves both; a chain still waiting for its CA fails
	// every handshake); then a client without one is served too.
	waitTrue(t, 15*time.Second, func() bool {
		code, err := status(withCert(caCert, caKey))
		_, otherErr := status(withCert(otherCert, otherKey))
		return err == nil && code == 200 && otherErr != nil
	})
	if code, err := status(withCert("", "")); err != nil || code != 200 {
		t.Errorf("OPTIONAL_MUTUAL, no client certificate: %d %v", code, err)
	}
}

// TestGatewayCertificateExpiryWarns: a Gateway's certificate that expires
// while nothing else changes shows in push status (its JSON and `sextant
// push status`) when it expires, and the gateway's admin API marks it
// expired: the operator learns it from the control plane, not from
// clients' failed handshakes.
func TestGatewayCertificateExpiryWarns(t *testing.T) {
	tlsAddr := freeAddr(t)
	_, proxy, admin, server := startMeshTLS(t, tlsAddr)
	dir := t.TempDir()
	// Valid for a few seconds: secret create refuses a certificate that
	// has already expired.
	expires := time.Now().Add(4 * time.Second)
	cert, key := testCert(t, dir, "shop", expires, "shop.example.com")
	if out, err := runOn(t, server, "", "secret", "create", "tls", "shop-cert", "--cert", cert, "--key", key); err != nil {
		t.Fatalf("secret create: %v\n%s", err, out)
	}
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	_, plainPort, _ := net.SplitHostPort(proxy)
	var tp, pp int
	fmt.Sscan(tlsPort, &tp)
	fmt.Sscan(plainPort, &pp)
	if out, err := runOn(t, server, fmt.Sprintf(istioGateway, tp, pp), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	var st struct {
		Warnings []string `json:"warnings"`
	}
	if err := getJSONInto(server+"/v1/push/status", &st); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(expires) && len(st.Warnings) != 0 {
		t.Fatalf("warnings before expiry: %q", st.Warnings)
	}
	// The gateway shows the chain's certificate and, once past its
	// not-after, marks it expired.
	waitTrue(t, 30*time.Second, func() bool {
		var conf struct {
			TLS []struct {
				Port   int
				Chains []struct {
					Certificates []struct {
						Secret  string
						Expired bool
					}
				}
			}
		}
		if getJSONInto("http://"+admin+"/v1/config", &conf) != nil {
			return false
		}
		for _, p := range conf.TLS {
			for _, c := range p.Chains {
				for _, crt := range c.Certificates {
					if p.Port == tp && crt.Secret == "default/shop-cert" && crt.Expired {
						return true
					}
				}
			}
		}
		return false
	})
	var out string
	waitTrue(t, 30*time.Second, func() bool {
		o, err := runOn(t, server, "", "push", "status")
		out = o
		return err == nil && strings.Contains(o, "warning: ") && strings.Contains(o, "secret default/shop-cert expired")
	})
	if !strings.Contains(out, "sextant secret create tls shop-cert --replace") {
		t.Errorf("the warning does not say how to rotate:\n%s", out)
	}
}

// getJSONInto decodes the JSON answer of a GET of url into v; a status
// other than 200 is an error.
func getJSONInto(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

const passthroughGateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  servers:
  - port: {number: %[1]d, name: tls, protocol: TLS}
    hosts: [vault.example.com]
    tls: {mode: PASSTHROUGH}
  - port: {number: %[1]d, name: https, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: SIMPLE, credentialName: shop-cert}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vault}
spec:
  hosts: [vault.example.com]
  gateways: [edge]
  tls:
  - match: [{sniHosts: [vault.example.com]}]
    route: [{destination: {host: vault}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [edge]
  http:
  - route: [{destination: {host: orders}}]
`

// TestIstioGatewayPassthrough: an Istio Gateway server in tls.mode
// PASSTHROUGH and a VirtualService TLS route by sniHosts make a real
// gateway forward the TLS of vault.example.com unopened to the service's
// endpoint (curl sees the endpoint's own certificate, HTTP/2 end to end),
// while the same port terminates shop.example.com with the gateway's.
func TestIstioGatewayPassthrough(t *testing.T) {
	tlsAddr := freeAddr(t)
	api, _, _, server := startMeshTLS(t, tlsAddr)
	ctx := context.Background()
	dir := t.TempDir()
	// The endpoint: HTTPS with its own certificate, which the gateway never has.
	vaultCert, vaultKey := testCert(t, dir, "vault", time.Now().Add(24*time.Hour), "vault.example.com")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "vault %s", r.Proto)
	})}
	go func() { _ = srv.ServeTLS(ln, vaultCert, vaultKey) }()
	t.Cleanup(func() { srv.Close() })
	vaultPort := ln.Addr().(*net.TCPAddr).Port
	up := startUpstream(t, "orders-1")
	if _, err := api.Register(ctx, client.Instance{ID: "v1", Service: "vault", Host: "127.0.0.1", Port: vaultPort},
		client.Instance{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: up.addr.Port}); err != nil {
		t.Fatal(err)
	}
	shopCert, shopKey := testCert(t, dir, "shop", time.Now().Add(24*time.Hour), "shop.example.com")
	if out, err := runOn(t, server, "", "secret", "create", "tls", "shop-cert", "--cert", shopCert, "--key", shopKey); err != nil {
		t.Fatalf("secret create: %v\n%s", err, out)
	}
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	var tp int
	fmt.Sscan(tlsPort, &tp)
	if out, err := runOn(t, server, fmt.Sprintf(passthroughGateway, tp), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	curl, err := debian.Ensure("curl", "curl")
	if err != nil {
		t.Fatal(err)
	}
	call := func(host, ca string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, curl, "-sS", "--http2", "--cacert", ca, "--resolve", host+":"+tlsPort+":127.0.0.1",
			"-w", " %{http_version}", "https://"+host+":"+tlsPort+"/").CombinedOutput()
		return string(out), err
	}
	var out string
	waitTrue(t, 20*time.Second, func() bool {
		out, err = call("vault.example.com", vaultCert)
		return err == nil && out == "vault HTTP/2.0 2"
	})
	// The gateway's own certificate would fail curl's check against the
	// endpoint's: passing it shows the TLS is the endpoint's.
	if out, err := call("shop.example.com", shopCert); err != nil || out != "orders-1 2" {
		t.Errorf("shop.example.com on the same port: %v: %q", err, out)
	}
	// A route to a host the server does not serve is refused at apply.
	bad := strings.Replace(fmt.Sprintf(passthroughGateway, tp), "sniHosts: [vault.example.com]", "sniHosts: [other.example.com]", 1)
	if out, err := runOn(t, server, bad, "config", "apply", "-f", "-"); err == nil || !strings.Contains(out+err.Error(), "spec.tls[0].match[0].sniHosts[0]") {
		t.Errorf("sniHosts not among hosts: %v\n%s", err, out)
	}
}
