package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

const meshGateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: https-mesh, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: ISTIO_MUTUAL}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [edge]
  http:
  - route: [{destination: {host: orders}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: edge-callers}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: ALLOW
  rules:
  - from: [{source: {principals: ["%s/ns/default/sa/frontend"]}}]
`

// TestGatewayMeshTLSWithAuthorization: a Gateway server in ISTIO_MUTUAL and
// an AuthorizationPolicy selecting the Gateway make a real gateway serve
// the mesh's mutual TLS at the edge with its own workload identity (issued
// by the server's authority): a workload the policy allows is served, one
// it does not gets 403 from the gateway's RBAC filter, a client with no
// certificate fails its handshake; with a PeerAuthentication selecting the
// gateway in PERMISSIVE, a client without a certificate is served.
func TestGatewayMeshTLSWithAuthorization(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway with an identity, workload certificates")
	}
	tlsAddr := freeAddr(t)
	api, _ := startMeshIdentityTLS(t, tlsAddr)
	ctx := context.Background()
	frontend, batch, td, tp := meshWorkloads(t, api, tlsAddr)
	if _, err := api.ApplyConfig(ctx, []byte(fmt.Sprintf(meshGateway, tp, td)), false); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(frontend.Bundle))
	gatewayID := "spiffe://" + td + "/ns/edge/sa/sextant-gateway"
	call := func(c *client.Certificate) (int, string, error) {
		conf := &tls.Config{ServerName: "shop.example.com", InsecureSkipVerify: true,
			// Istio's clients check the gateway's SPIFFE ID, not a host name.
			VerifyConnection: func(cs tls.ConnectionState) error {
				if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots}); err != nil {
					return err
				}
				if id := cs.PeerCertificates[0].URIs; len(id) != 1 || id[0].String() != gatewayID {
					return fmt.Errorf("gateway %v is not %s", id, gatewayID)
				}
				return nil
			}}
		if c != nil {
			kp, err := tls.X509KeyPair([]byte(c.CertificateChain), []byte(c.KeyPEM))
			if err != nil {
				t.Fatal(err)
			}
			conf.Certificates = []tls.Certificate{kp}
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, tlsAddr)
			}}}
		resp, err := hc.Get("https://shop.example.com/buy")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	var code int
	var body string
	var err error
	waitTrue(t, 30*time.Second, func() bool {
		code, body, err = call(&frontend)
		return err == nil && code == 200 && body == "orders-1"
	})
	if code, body, err = call(&batch); err != nil || code != http.StatusForbidden || !strings.Contains(body, "RBAC: access denied") {
		t.Errorf("a workload the policy does not allow: %d %q %v", code, body, err)
	}
	if _, _, err := call(nil); err == nil {
		t.Error("a client without a certificate was served")
	}

	// PERMISSIVE for the gateway's workloads: a client without a
	// certificate is served (no policy asks for a principal then), one
	// with a certificate is still verified.
	permissive := `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: edge}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  mtls: {mode: PERMISSIVE}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: edge-callers}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: ALLOW
  rules:
  - to: [{operation: {methods: [GET]}}]
`
	if _, err := api.ApplyConfig(ctx, []byte(permissive), false); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 30*time.Second, func() bool {
		code, body, err = call(nil)
		return err == nil && code == 200 && body == "orders-1"
	})
	if code, _, err = call(&batch); err != nil || code != 200 {
		t.Errorf("PERMISSIVE, a mesh certificate: %d %v", code, err)
	}
}

// meshWorkloads registers orders (a real upstream) and issues the
// certificates of two workloads, frontend and batch; it returns them, the
// trust domain and the gateway's TLS port (of tlsAddr).
func meshWorkloads(t *testing.T, api *client.Client, tlsAddr string) (frontend, batch client.Certificate, td string, tp int) {
	t.Helper()
	ctx := context.Background()
	up := startUpstream(t, "orders-1")
	if _, err := api.Register(ctx, client.Instance{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: up.addr.Port}); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 15*time.Second, func() bool {
		var err error
		frontend, err = api.Certificate(ctx, "default", "frontend", 0)
		return err == nil
	})
	batch, err := api.Certificate(ctx, "default", "batch", 0)
	if err != nil {
		t.Fatal(err)
	}
	td = strings.TrimPrefix(strings.Split(frontend.Identity, "/ns/")[0], "spiffe://")
	_, port, _ := net.SplitHostPort(tlsAddr)
	fmt.Sscan(port, &tp)
	return frontend, batch, td, tp
}
