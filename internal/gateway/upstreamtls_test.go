package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// issueURI returns a certificate (PEM) and key for a SPIFFE-style URI SAN
// and optional DNS names, usable by servers and clients, as a mesh CA
// issues workload certificates.
func (p *pki) issueURI(t testing.TB, uri string, dns ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.count.Add(1)), Subject: pkix.Name{CommonName: "workload"},
		URIs: []*url.URL{u}, DNSNames: dns, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func keyPair(t testing.TB, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startHTTPSUpstream is a Go net/http HTTPS server with cert; clientCAs
// set requires a client certificate from them; h2 serves HTTP/2 (ALPN).
// Its answers name the protocol, the server name the client asked for and
// the client certificate's serial number.
func startHTTPSUpstream(t *testing.T, name string, cert tls.Certificate, clientCAs *x509.CertPool, h2 bool) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	if h2 {
		conf.NextProtos = []string{"h2"}
	}
	if clientCAs != nil {
		conf.ClientCAs, conf.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
	}
	u := &upstream{name: name, addr: ln.Addr().String()}
	tcp := ln.Addr().(*net.TCPAddr)
	u.host, u.port = tcp.IP.String(), uint32(tcp.Port)
	var p http.Protocols
	p.SetHTTP1(!h2)
	p.SetHTTP2(h2)
	countConns := func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.srv = &http.Server{Protocols: &p, TLSConfig: conf, ErrorLog: log.New(io.Discard, "", 0), ConnState: countConns, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.calls.Add(1)
		serial := "-"
		if len(r.TLS.PeerCertificates) > 0 {
			serial = r.TLS.PeerCertificates[0].SerialNumber.String()
		}
		if n%10 == 0 && !h2 {
			w.Header().Set("Connection", "close") // new connections now and then: they see rotations
		}
		fmt.Fprintf(w, "upstream=%s proto=%s sni=%s client=%s", name, r.Proto, r.TLS.ServerName, serial)
	})}
	go func() { _ = u.srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = u.srv.Close() })
	return u
}

// tlsCluster is an EDS cluster with an UpstreamTlsContext.
func tlsCluster(c *cluster.Cluster, ctx *tlsv3.UpstreamTlsContext) *cluster.Cluster {
	a, _ := anypb.New(ctx)
	c.TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}
	return c
}

func sdsConfig(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: ads}
}

// sdsValidation is Istio's shape: the CA by SDS, SAN matchers beside it.
func sdsValidation(ca string, sans ...*tlsv3.SubjectAltNameMatcher) *tlsv3.CommonTlsContext_CombinedValidationContext {
	return &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
		DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
		ValidationContextSdsSecretConfig: sdsConfig(ca)}}
}

func exactSAN(typ tlsv3.SubjectAltNameMatcher_SanType, v string) *tlsv3.SubjectAltNameMatcher {
	return &tlsv3.SubjectAltNameMatcher{SanType: typ, Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: v}}}
}

// TestUpstreamTLSSimple: a cluster with TLS to its endpoints (SNI, the CA
// by SDS, a DNS SAN matcher) reaches a Go HTTPS server; the SNI is sent.
// A wrong CA and a SAN mismatch are 503s naming the failure, recorded as
// tls_failure, and nothing reaches the endpoint in plaintext.
func TestUpstreamTLSSimple(t *testing.T) {
	ca, other := newPKI(t), newPKI(t)
	sc, sk := ca.issue(t, false, "orders.example.com")
	u := startHTTPSUpstream(t, "secure", keyPair(t, sc, sk), nil, false)
	cp := startControlPlane(t, "")
	ctx := func(san string) *tlsv3.UpstreamTlsContext {
		return &tlsv3.UpstreamTlsContext{Sni: "orders.example.com", CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:         []string{"http/1.1"},
			ValidationContextType: sdsValidation("orders-ca", exactSAN(tlsv3.SubjectAltNameMatcher_DNS, san))}}
	}
	res := []typesResource{rdsListener("gw", "r"),
		routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/bad-ca", "bad-ca"), prefixRoute("/bad-san", "bad-san"), prefixRoute("/", "ok"))),
		tlsCluster(edsCluster("ok"), ctx("orders.example.com")), assignment("ok", ep{u: u}),
		tlsCluster(edsCluster("bad-ca"), func() *tlsv3.UpstreamTlsContext {
			c := ctx("orders.example.com")
			c.CommonTlsContext.ValidationContextType = sdsValidation("other-ca")
			return c
		}()), assignment("bad-ca", ep{u: u}),
		tlsCluster(edsCluster("bad-san"), ctx("payments.example.com")), assignment("bad-san", ep{u: u}),
		caSecret("orders-ca", ca.pem), caSecret("other-ca", other.pem)}
	cp.set(res...)
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/x", "upstream=secure proto=HTTP/1.1 sni=orders.example.com client=-")

	for _, tc := range []struct{ path, cluster, want string }{
		{"/bad-ca", "bad-ca", "certificate verify failed: x509: certificate signed by unknown authority"},
		{"/bad-san", "bad-san", "subject alt name mismatch: the certificate's names [DNS:orders.example.com]"},
	} {
		before := u.calls.Load()
		code, body, h := g.get(t, tc.path)
		if code != 503 || h.Get(gateway.ErrorHeader) != "tls_failure" || !strings.Contains(body, tc.want) || !strings.Contains(body, u.addr) {
			t.Errorf("%s: %d %s %q, want 503 tls_failure naming %q and the endpoint", tc.path, code, h.Get(gateway.ErrorHeader), body, tc.want)
		}
		if u.calls.Load() != before {
			t.Errorf("%s: the endpoint got a call over a refused connection", tc.path)
		}
		var rec string
		waitFor(t, "the call record of "+tc.path, func() bool {
			calls := g.calls(t, tc.cluster)
			if len(calls) == 0 {
				return false
			}
			rec = calls[len(calls)-1].Reason
			return true
		})
		if rec != "tls_failure" {
			t.Errorf("%s: record reason %q, want tls_failure", tc.path, rec)
		}
	}
}

// TestUpstreamTLSMutual: a client certificate by SDS for an endpoint that
// requires one, and a SPIFFE ID checked by a URI SAN matcher; a cluster
// whose client certificate has not arrived answers 503 naming the secret,
// never plaintext. Rotating the client certificate mid-traffic fails no
// call, and new connections carry the new certificate.
func TestUpstreamTLSMutual(t *testing.T) {
	ca := newPKI(t)
	const id = "spiffe://cluster.local/ns/default/sa/orders"
	sc, sk := ca.issueURI(t, id)
	u := startHTTPSUpstream(t, "mtls", keyPair(t, sc, sk), ca.pool, false)
	cc, ck := ca.issueURI(t, "spiffe://cluster.local/ns/edge/sa/gateway")
	cp := startControlPlane(t, "")
	ctx := func(cert string) *tlsv3.UpstreamTlsContext {
		return &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsConfig(cert)},
			ValidationContextType:          sdsValidation("mesh-ca", exactSAN(tlsv3.SubjectAltNameMatcher_URI, id))}}
	}
	res := []typesResource{rdsListener("gw", "r"),
		routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/missing", "missing"), prefixRoute("/", "mtls"))),
		tlsCluster(edsCluster("mtls"), ctx("gw-cert")), assignment("mtls", ep{u: u}),
		tlsCluster(edsCluster("missing"), ctx("no-such-cert")), assignment("missing", ep{u: u}),
		caSecret("mesh-ca", ca.pem), certSecret("gw-cert", cc, ck)}
	cp.set(res...)
	g := startGateway(t, cp.addr)
	first := keyPair(t, cc, ck).Leaf.SerialNumber.String()
	g.waitServes(t, "/x", "client="+first)

	code, body, h := g.get(t, "/missing")
	if code != 503 || h.Get(gateway.ErrorHeader) != "tls_failure" || !strings.Contains(body, `secret \"no-such-cert\" not received`) {
		t.Errorf("a cluster without its client certificate: %d %q", code, body)
	}

	var calls, failed atomic.Int64
	var lastErr atomic.Value
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := g.client.Get(g.url + "/r")
			calls.Add(1)
			if err != nil {
				failed.Add(1)
				lastErr.Store(err.Error())
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				failed.Add(1)
				lastErr.Store(fmt.Sprintf("%d %s", resp.StatusCode, b))
			}
		}
	}()
	waitFor(t, "calls before the rotation", func() bool { return calls.Load() > 30 })
	nc, nk := ca.issueURI(t, "spiffe://cluster.local/ns/edge/sa/gateway")
	res[len(res)-1] = certSecret("gw-cert", nc, nk)
	cp.set(res...)
	g.waitServes(t, "/x", "client="+keyPair(t, nc, nk).Leaf.SerialNumber.String())
	n := calls.Load()
	waitFor(t, "calls after the rotation", func() bool { return calls.Load() > n+30 })
	close(stop)
	<-done
	if failed.Load() != 0 {
		t.Errorf("%d of %d calls failed across the rotation, last: %v", failed.Load(), calls.Load(), lastErr.Load())
	}
}

// TestUpstreamTLSH2: an HTTP/2 cluster over TLS (ALPN h2) carries HTTP/1.1
// clients' calls and a grpc-go unary call to a grpc-go server with TLS
// credentials.
func TestUpstreamTLSH2(t *testing.T) {
	ca := newPKI(t)
	sc, sk := ca.issue(t, false, "grpc.internal")
	u := startHTTPSUpstream(t, "h2", keyPair(t, sc, sk), nil, true)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := &grpcServer{name: "tls-grpc", cancelled: make(chan struct{}, 16),
		srv: grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{keyPair(t, sc, sk)}})))}
	testgrpc.RegisterTestServiceServer(gs.srv, gs)
	go func() { _ = gs.srv.Serve(ln) }()
	t.Cleanup(gs.srv.Stop)
	tcp := ln.Addr().(*net.TCPAddr)
	gs.up = &upstream{name: "tls-grpc", addr: ln.Addr().String(), host: tcp.IP.String(), port: uint32(tcp.Port)}

	ctx := &tlsv3.UpstreamTlsContext{Sni: "grpc.internal", CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols: []string{"h2"}, ValidationContextType: sdsValidation("ca")}}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"),
		routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/grpc.testing.", "grpc"), prefixRoute("/", "web"))),
		tlsCluster(h2cCluster("web"), ctx), assignment("web", ep{u: u}),
		tlsCluster(h2cCluster("grpc"), ctx), assignment("grpc", ep{u: gs.up}),
		caSecret("ca", ca.pem))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/x", "upstream=h2 proto=HTTP/2.0 sni=grpc.internal")
	c := grpcClient(t, g)
	resp, err := c.UnaryCall(callCtx(t, ""), &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("hi")}})
	if err != nil || string(resp.GetPayload().GetBody()) != "tls-grpc:hi" {
		t.Fatalf("a gRPC call over TLS: %v %q", err, resp.GetPayload().GetBody())
	}
}

// TestUpstreamTLSFailureRetriedAndEjected: an endpoint whose certificate
// fails verification is a connect failure: the route's retry policy
// (connect-failure, another host) sends the call to the good endpoint, and
// outlier detection (local-origin failures) ejects the bad one.
func TestUpstreamTLSFailureRetriedAndEjected(t *testing.T) {
	ca, other := newPKI(t), newPKI(t)
	gc, gk := ca.issue(t, false, "orders.internal")
	bc, bk := other.issue(t, false, "orders.internal")
	good := startHTTPSUpstream(t, "good", keyPair(t, gc, gk), nil, false)
	bad := startHTTPSUpstream(t, "bad", keyPair(t, bc, bk), nil, false)
	r := prefixRoute("/", "orders")
	r.GetRoute().RetryPolicy = &route.RetryPolicy{RetryOn: "connect-failure", NumRetries: wrapperspb.UInt32(2),
		RetryHostPredicate:            []*route.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts"}},
		HostSelectionRetryMaxAttempts: 5}
	c := tlsCluster(edsCluster("orders"), &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		ValidationContextType: sdsValidation("ca")}})
	c.OutlierDetection = &cluster.OutlierDetection{SplitExternalLocalOriginErrors: true, ConsecutiveLocalOriginFailure: wrapperspb.UInt32(2),
		BaseEjectionTime: durationpb.New(time.Minute), MaxEjectionPercent: wrapperspb.UInt32(50)}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, r)), c,
		assignment("orders", ep{u: good}, ep{u: bad}), caSecret("ca", ca.pem))
	g := startGateway(t, cp.addr)
	// No call before the CA is applied: a call's first try then fails
	// without a connection (not ready), previous_hosts keeps its retries
	// off that endpoint, and if the CA comes meanwhile both retries go to
	// the bad one and eject it, with no call retried to the good one (1
	// run in 30 under load).
	waitFor(t, "the CA, the endpoints and the routes", func() bool {
		var cfg struct {
			Listener    string                       `json:"listener"`
			RouteConfig string                       `json:"route_config"`
			Resources   map[string][]json.RawMessage `json:"resources"`
		}
		g.adminJSON(t, "/v1/config", &cfg)
		return cfg.Listener != "" && cfg.RouteConfig != "" && len(cfg.Resources["ClusterLoadAssignment"]) >= 1 &&
			len(cfg.Resources["Secret"]) >= 1
	})
	for i := range 20 {
		if code, body, _ := g.get(t, "/"); code != 200 || !strings.HasPrefix(body, "upstream=good") {
			t.Fatalf("call %d: %d %q", i, code, body)
		}
	}
	if bad.calls.Load() != 0 {
		t.Fatalf("the endpoint with an untrusted certificate got %d calls", bad.calls.Load())
	}
	waitFor(t, "the bad endpoint ejected", func() bool {
		return metric(t, g, `sextant_gateway_endpoint_ejected{cluster="orders",endpoint="`+bad.addr+`"}`) == 1
	})
	// Each connection to the bad endpoint was a call's first try (a retry
	// leaves it out), which the call's one retry took to the good one.
	waitFor(t, "the call records", func() bool { return len(g.calls(t, "orders")) >= 20 })
	retried := 0
	for _, c := range g.calls(t, "orders") {
		if c.Retries == 0 {
			continue
		}
		if c.Retries != 1 || c.Status != 200 || c.Endpoint != good.addr {
			t.Errorf("a retried call: %d retries, status %d at %s (the good endpoint: %s)", c.Retries, c.Status, c.Endpoint, good.addr)
		}
		retried++
	}
	if n := bad.conns.Load(); n < 2 || int64(retried) != n {
		t.Fatalf("%d calls retried to the good endpoint, %d connections to the bad one (2 eject it)", retried, n)
	}
}

// TestUpstreamTLSNotReadyEjectsNothing: calls made while a TLS cluster's
// CA secret has not come yet fail as tls_failure, but no connection was
// tried, so outlier detection learns nothing of the endpoint: once the
// secret comes, the endpoint serves at once. (Counting them ejected the
// only good endpoint for a minute when the secret came a little after the
// endpoints, as on a loaded machine.)
func TestUpstreamTLSNotReadyEjectsNothing(t *testing.T) {
	ca := newPKI(t)
	gc, gk := ca.issue(t, false, "orders.internal")
	good := startHTTPSUpstream(t, "good", keyPair(t, gc, gk), nil, false)
	c := tlsCluster(edsCluster("orders"), &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		ValidationContextType: sdsValidation("ca")}})
	c.OutlierDetection = &cluster.OutlierDetection{SplitExternalLocalOriginErrors: true, ConsecutiveLocalOriginFailure: wrapperspb.UInt32(2),
		BaseEjectionTime: durationpb.New(time.Minute), MaxEjectionPercent: wrapperspb.UInt32(100)}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "orders"))), c,
		assignment("orders", ep{u: good})) // no CA secret yet
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	for i := range 5 {
		if code, _, h := g.get(t, "/"); code != 503 || h.Get(gateway.ErrorHeader) != "tls_failure" {
			t.Fatalf("call %d without the CA: %d %q", i, code, h.Get(gateway.ErrorHeader))
		}
	}
	if n := metric(t, g, `sextant_gateway_endpoint_ejected{cluster="orders",endpoint="`+good.addr+`"}`); n != 0 {
		t.Fatalf("the endpoint was ejected (%v) for the gateway's own missing secret", n)
	}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "orders"))), c,
		assignment("orders", ep{u: good}), caSecret("ca", ca.pem))
	g.waitServes(t, "/", "upstream=good")
	if good.calls.Load() == 0 {
		t.Fatal("the endpoint served without a call reaching it")
	}
}

// TestUpstreamTLSIdentity: Sextant's ISTIO_MUTUAL cluster (certificate
// provider instances) uses the gateway's identity: 503 naming it until
// SetIdentity, then the endpoint, which requires a mesh client
// certificate, answers; a new identity reaches new connections.
func TestUpstreamTLSIdentity(t *testing.T) {
	ca := newPKI(t)
	sc, sk := ca.issueURI(t, "spiffe://td/ns/default/sa/orders")
	u := startHTTPSUpstream(t, "mesh", keyPair(t, sc, sk), ca.pool, false)
	c := edsCluster("m")
	c.TransportSocket = xds.Cluster("default/orders", config.Policy{TLS: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}}).TransportSocket
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "m"))), c, assignment("m", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	code, body, h := g.get(t, "/")
	if code != 503 || h.Get(gateway.ErrorHeader) != "tls_failure" || !strings.Contains(body, "the gateway's identity (default) not set") {
		t.Fatalf("without an identity: %d %q", code, body)
	}
	gc, gk := ca.issueURI(t, "spiffe://td/ns/edge/sa/gateway")
	if err := g.g.SetIdentity(gc, gk, ca.pem); err != nil {
		t.Fatal(err)
	}
	g.waitServes(t, "/", "client="+keyPair(t, gc, gk).Leaf.SerialNumber.String())
	gc2, gk2 := ca.issueURI(t, "spiffe://td/ns/edge/sa/gateway")
	if err := g.g.SetIdentity(gc2, gk2, ca.pem); err != nil {
		t.Fatal(err)
	}
	g.waitServes(t, "/", "client="+keyPair(t, gc2, gk2).Leaf.SerialNumber.String()) // the upstream closes every 10th connection
	if err := g.g.SetIdentity(gc2, gc2, ca.pem); err == nil {
		t.Fatal("a certificate as its own key was accepted")
	}
}
