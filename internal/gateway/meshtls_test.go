package gateway_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// meshChain makes a TLS filter chain the mesh's mutual TLS, as Sextant's
// control plane publishes a Gateway server in ISTIO_MUTUAL: the gateway's
// own workload certificate and the mesh's roots from the certificate
// provider instance, client certificates required.
func meshChain(d *tlsv3.DownstreamTlsContext) {
	c := d.CommonTlsContext
	c.TlsCertificateSdsSecretConfigs = nil
	c.TlsCertificateProviderInstance = &tlsv3.CertificateProviderPluginInstance{InstanceName: "sextant", CertificateName: "default"}
	c.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: "sextant", CertificateName: "ROOTCA"}}}
	d.RequireClientCertificate = wrapperspb.Bool(true)
}

// TestTLSChainOnTheGatewayIdentity: a TLS filter chain whose certificate
// and client roots are the certificate provider instance serves with the
// gateway's workload identity (SetIdentity): nothing before it is set;
// then a client with a certificate of the mesh's roots is served and sees
// the gateway's SPIFFE ID, one without a certificate or with another CA's
// fails its handshake; a new identity serves new connections.
func TestTLSChainOnTheGatewayIdentity(t *testing.T) {
	mesh, other := newPKI(t), newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	cp.set(tlsListener("gw-tls", g.tlsPort(), tlsChain{names: []string{"m.test"}, mod: meshChain}),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "up"))), edsCluster("up"), assignment("up", ep{u: u}))
	cc, ck := mesh.issueURI(t, "spiffe://td/ns/default/sa/client")
	oc, okey := other.issueURI(t, "spiffe://td/ns/default/sa/client")
	// The gateway's SPIFFE ID is checked, not a host name (Istio's way).
	client := func(certs ...tls.Certificate) *http.Client {
		c := g.tlsClient(mesh.pool, true, certs...)
		tr := c.Transport.(*http.Transport)
		tr.TLSClientConfig.InsecureSkipVerify = true
		tr.TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: mesh.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			return err
		}
		tr.TLSClientConfig.ServerName = "m.test"
		return c
	}
	serving := func(c *http.Client) (string, bool) {
		resp, err := c.Get("https://m.test/")
		if err != nil {
			return "", false
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].URIs[0].String() + " " + resp.TLS.PeerCertificates[0].SerialNumber.String(), resp.StatusCode == 200
	}
	g.waitEndpoints(t, 1)
	if _, ok := serving(client(keyPair(t, cc, ck))); ok {
		t.Fatal("served before the gateway has an identity")
	}
	gc, gk := mesh.issueURI(t, "spiffe://td/ns/edge/sa/gateway")
	if err := g.g.SetIdentity(gc, gk, mesh.pem); err != nil {
		t.Fatal(err)
	}
	want := "spiffe://td/ns/edge/sa/gateway " + keyPair(t, gc, gk).Leaf.SerialNumber.String()
	waitFor(t, "served on the identity", func() bool { got, ok := serving(client(keyPair(t, cc, ck))); return ok && got == want })
	if _, ok := serving(client()); ok {
		t.Error("served a client without a certificate")
	}
	if _, ok := serving(client(keyPair(t, oc, okey))); ok {
		t.Error("served a client of another CA")
	}
	gc2, gk2 := mesh.issueURI(t, "spiffe://td/ns/edge/sa/gateway")
	if err := g.g.SetIdentity(gc2, gk2, mesh.pem); err != nil {
		t.Fatal(err)
	}
	want2 := "spiffe://td/ns/edge/sa/gateway " + keyPair(t, gc2, gk2).Leaf.SerialNumber.String()
	waitFor(t, "a new identity", func() bool { got, ok := serving(client(keyPair(t, cc, ck))); return ok && got == want2 })
}
