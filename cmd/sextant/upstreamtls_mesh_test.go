package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// startMeshIdentity is startMesh with the gateway registered at the server
// and getting its workload identity (--identity-namespace edge).
func startMeshIdentity(t *testing.T) (api *client.Client, proxy string) {
	t.Helper()
	return startMeshIdentityTLS(t, "")
}

// startMeshIdentityTLS is startMeshIdentity with the gateway also serving
// TLS on tlsAddr ("": none).
func startMeshIdentityTLS(t *testing.T, tlsAddr string) (api *client.Client, proxy string) {
	t.Helper()
	api, proxy, _, _ = startMeshWith(t, tlsAddr, 30*time.Second, func(f *gatewayFlags, server string) {
		f.registry, f.identityNS, f.identitySA, f.node = server, "edge", "sextant-gateway", "mesh-identity-gateway"
	})
	return api, proxy
}

const istioMutualConfig = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL%s}
`

// TestUpstreamIstioMutualEndToEnd: a DestinationRule's tls ISTIO_MUTUAL
// through a gateway that got its own workload identity from the server's
// authority (--identity-namespace): the endpoint, with a mesh certificate
// for spiffe://.../ns/default/sa/orders, requires a client certificate of
// the mesh and checks it is the gateway's SPIFFE ID; the gateway checks
// the endpoint's SPIFFE ID (any service account of the namespace, or
// subjectAltNames), and refuses a mismatch with a 503.
func TestUpstreamIstioMutualEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and a mesh TLS upstream")
	}
	api, proxy := startMeshIdentity(t)
	ctx := context.Background()
	var mc client.Certificate
	waitTrue(t, 15*time.Second, func() bool {
		var err error
		mc, err = api.Certificate(ctx, "default", "orders", 0)
		return err == nil
	})
	kp, err := tls.X509KeyPair([]byte(mc.CertificateChain), []byte(mc.KeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(mc.Bundle))
	td := strings.TrimPrefix(strings.Split(mc.Identity, "/ns/")[0], "spiffe://")
	gatewayID := "spiffe://" + td + "/ns/edge/sa/sextant-gateway"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), TLSConfig: &tls.Config{Certificates: []tls.Certificate{kp},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if id := cs.PeerCertificates[0].URIs; len(id) != 1 || id[0].String() != gatewayID {
				return fmt.Errorf("client %v is not %s", id, gatewayID)
			}
			return nil
		}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "orders-mesh client=%s", r.TLS.PeerCertificates[0].URIs[0])
		})}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })

	if _, err := api.ApplyConfig(ctx, []byte(fmt.Sprintf(istioMutualConfig, "")), false); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Register(ctx, client.Instance{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port}); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 20*time.Second, func() bool {
		body, code := tget(t, proxy, "orders", "/", nil)
		return code == 200 && body == "orders-mesh client="+gatewayID
	})

	// An endpoint identity other than subjectAltNames': refused.
	if _, err := api.ApplyConfig(ctx, []byte(fmt.Sprintf(istioMutualConfig, ", subjectAltNames: [\"spiffe://"+td+"/ns/default/sa/payments\"]")), false); err != nil {
		t.Fatal(err)
	}
	var body string
	var code int
	waitTrue(t, 20*time.Second, func() bool { body, code = tget(t, proxy, "orders", "/", nil); return code == 503 })
	if !strings.Contains(body, "tls_failure") || !strings.Contains(body, "subject alt name mismatch") || !strings.Contains(body, mc.Identity) {
		t.Errorf("SAN mismatch: %d %s", code, body)
	}
}
