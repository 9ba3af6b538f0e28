package gateway_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/gorilla/websocket"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// pki is a test CA issuing server and client certificates.
type pki struct {
	cert  *x509.Certificate
	key   *ecdsa.PrivateKey
	pem   []byte
	pool  *x509.CertPool
	count atomic.Int64
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: x509.NewCertPool()}
	p.pool.AddCert(cert)
	p.count.Store(1)
	return p
}

// issue returns a certificate (PEM) and key (PEM) for names, a client
// certificate when client is set; its serial number is unique.
func (p *pki) issue(t testing.TB, client bool, names ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.count.Add(1)), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		}
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func certSecret(name string, certPEM, keyPEM []byte) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: certPEM}},
		PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: keyPEM}},
	}}}
}

func caSecret(name string, caPEM []byte) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: caPEM}}}}}
}

var ads = &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}, ResourceApiVersion: core.ApiVersion_V3}

// tlsChain is one filter chain of tlsListener: the server names it matches
// (none: any), its certificate's SDS secret, and for mutual TLS the CA's.
type tlsChain struct {
	names     []string
	cert, ca  string
	require   bool
	routeName string
	mod       func(*tlsv3.DownstreamTlsContext)
}

// tlsListener is what Istio publishes for a Gateway's HTTPS server: filter
// chains matched by SNI, each a DownstreamTlsContext with its certificate
// (and CA) by SDS over ADS, ALPN h2 and http/1.1, TLS 1.2..1.3.
func tlsListener(name string, port uint32, chains ...tlsChain) *listener.Listener {
	l := &listener.Listener{Name: name, Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: "0.0.0.0", PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}}
	for _, c := range chains {
		rn := c.routeName
		if rn == "" {
			rn = "routes"
		}
		m := &hcm.HttpConnectionManager{StatPrefix: "https", RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			RouteConfigName: rn, ConfigSource: ads}},
			UpgradeConfigs: []*hcm.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}}
		ma, _ := anypb.New(m)
		d := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2, TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3},
			AlpnProtocols:                  []string{"h2", "http/1.1"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: c.cert, SdsConfig: ads}},
		}}
		if c.ca != "" {
			d.RequireClientCertificate = wrapperspb.Bool(c.require)
			d.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
					ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: c.ca, SdsConfig: ads}}}
		}
		if c.mod != nil {
			c.mod(d)
		}
		da, _ := anypb.New(d)
		fc := &listener.FilterChain{
			Filters: []*listener.Filter{{Name: "envoy.filters.network.http_connection_manager",
				ConfigType: &listener.Filter_TypedConfig{TypedConfig: ma}}},
			TransportSocket: &core.TransportSocket{Name: "envoy.transport_sockets.tls",
				ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: da}},
		}
		if len(c.names) > 0 {
			fc.FilterChainMatch = &listener.FilterChainMatch{ServerNames: c.names}
		}
		l.FilterChains = append(l.FilterChains, fc)
	}
	return l
}

func (w *gw) tlsPort() uint32 {
	_, p, _ := net.SplitHostPort(w.tls)
	var n uint32
	fmt.Sscan(p, &n)
	return n
}

// tlsClient is a Go client of the gateway's TLS port for host (SNI and
// Host), HTTP/2 when h2, HTTP/1.1 otherwise.
func (w *gw) tlsClient(ca *x509.CertPool, h2 bool, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca, Certificates: certs},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, w.tls)
		},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// protoEcho answers with the protocol and forwarding scheme it saw.
func protoEcho(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "proto=%s xfp=%s host=%s", r.Proto, r.Header.Get("X-Forwarded-Proto"), r.Host)
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// twoHosts publishes a TLS listener with a.test and b.test, each its own
// certificate by SDS, both routed to upstream u.
func twoHosts(t *testing.T, ca *pki, port uint32, u *upstream, extra ...types.Resource) []types.Resource {
	aCert, aKey := ca.issue(t, false, "a.test")
	bCert, bKey := ca.issue(t, false, "b.test", "*.b.test")
	return append([]types.Resource{
		tlsListener("gw-tls", port, tlsChain{names: []string{"a.test"}, cert: "a-cert"}, tlsChain{names: []string{"b.test", "*.b.test"}, cert: "b-cert"}),
		certSecret("a-cert", aCert, aKey), certSecret("b-cert", bCert, bKey),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "up"))),
		edsCluster("up"), assignment("up", ep{u: u}),
	}, extra...)
}

// TestTLSServesBySNIAndALPN: Go's client and curl over HTTPS, HTTP/2 and
// HTTP/1.1 by ALPN, the certificate chosen by SNI (exact and wildcard), the
// upstream told X-Forwarded-Proto: https; an unknown server name fails the
// handshake.
func TestTLSServesBySNIAndALPN(t *testing.T) {
	ca := newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	cp.set(twoHosts(t, ca, g.tlsPort(), u)...)

	for _, h2 := range []bool{true, false} {
		c := g.tlsClient(ca.pool, h2)
		for _, host := range []string{"a.test", "b.test", "x.b.test"} {
			var resp *http.Response
			waitFor(t, host+" over TLS", func() bool {
				var err error
				resp, err = c.Get("https://" + host + "/x")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == 200
			})
			resp, err := c.Get("https://" + host + "/x")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			wantProto := map[bool]int{true: 2, false: 1}[h2]
			if resp.ProtoMajor != wantProto || !strings.Contains(string(body), "xfp=https") || !strings.Contains(string(body), "host="+host) {
				t.Errorf("%s h2=%v: %s %q", host, h2, resp.Proto, body)
			}
			leaf := resp.TLS.PeerCertificates[0]
			if err := leaf.VerifyHostname(host); err != nil {
				t.Errorf("%s: served the wrong certificate: %v (%v)", host, err, leaf.DNSNames)
			}
		}
	}
	// No chain for c.test: the handshake fails, the gateway stays up.
	if _, err := g.tlsClient(ca.pool, false).Get("https://c.test/"); err == nil {
		t.Error("c.test: handshake succeeded with no filter chain for it")
	}

	curl, err := debian.Ensure("curl", "curl")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	caFile := writeFile(t, dir, "ca.pem", ca.pem)
	for flag, want := range map[string]string{"--http2": "2", "--http1.1": "1.1"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, curl, "-sS", "--cacert", caFile, flag,
			"--resolve", fmt.Sprintf("a.test:%d:127.0.0.1", g.tlsPort()),
			"-w", " version=%{http_version}", fmt.Sprintf("https://a.test:%d/curl", g.tlsPort())).CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), "version="+want) || !strings.Contains(string(out), "xfp=https") {
			t.Errorf("curl %s: %v: %s", flag, err, out)
		}
	}
}

// TestTLSMutual: a chain requiring client certificates (the CA by SDS, as
// Istio's MUTUAL mode publishes it) refuses a client without one at the
// handshake and serves one with a certificate the CA issued, Go's client
// and curl alike.
func TestTLSMutual(t *testing.T) {
	ca, clients := newPKI(t), newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	sc, sk := ca.issue(t, false, "m.test")
	cp.set(tlsListener("gw-tls", g.tlsPort(), tlsChain{names: []string{"m.test"}, cert: "m", ca: "m-cacert", require: true}),
		certSecret("m", sc, sk), caSecret("m-cacert", clients.pem),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "up"))), edsCluster("up"), assignment("up", ep{u: u}))
	cc, ck := clients.issue(t, true, "client")
	pair, err := tls.X509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	with := g.tlsClient(ca.pool, true, pair)
	waitFor(t, "mutual TLS to serve", func() bool {
		resp, err := with.Get("https://m.test/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if resp, err := g.tlsClient(ca.pool, true).Get("https://m.test/"); err == nil {
		resp.Body.Close()
		t.Fatalf("no client certificate: served %d", resp.StatusCode)
	}
	// The admin API says what a handshake on this port gets: the chain,
	// its certificate's secret and expiry, client certificates required.
	var conf struct {
		TLS []struct {
			Port     uint32
			Listener string
			Chains   []struct {
				ServerNames       []string `json:"server_names"`
				Ready             bool
				ClientCertificate string `json:"client_certificate"`
				ClientCA          string `json:"client_ca_secret"`
				Certificates      []struct {
					Secret   string
					DNSNames []string  `json:"dns_names"`
					NotAfter time.Time `json:"not_after"`
					Expired  bool
				}
			}
		}
	}
	g.adminJSON(t, "/v1/config", &conf)
	if len(conf.TLS) != 1 || conf.TLS[0].Port != g.tlsPort() || conf.TLS[0].Listener != "gw-tls" || len(conf.TLS[0].Chains) != 1 {
		t.Fatalf("admin /v1/config tls: %+v", conf.TLS)
	}
	ch := conf.TLS[0].Chains[0]
	if !ch.Ready || ch.ClientCertificate != "required" || ch.ClientCA != "m-cacert" || !slices.Equal(ch.ServerNames, []string{"m.test"}) ||
		len(ch.Certificates) != 1 || ch.Certificates[0].Secret != "m" || ch.Certificates[0].Expired ||
		!slices.Equal(ch.Certificates[0].DNSNames, []string{"m.test"}) || time.Until(ch.Certificates[0].NotAfter) < 23*time.Hour {
		t.Errorf("admin /v1/config tls chain: %+v", ch)
	}
	// A certificate of another CA is refused too.
	oc, ok := ca.issue(t, true, "other")
	other, _ := tls.X509KeyPair(oc, ok)
	if resp, err := g.tlsClient(ca.pool, true, other).Get("https://m.test/"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client certificate of another CA: served %d", resp.StatusCode)
	}

	curl, err := debian.Ensure("curl", "curl")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	args := []string{"-sS", "--http2", "--cacert", writeFile(t, dir, "ca.pem", ca.pem),
		"--resolve", fmt.Sprintf("m.test:%d:127.0.0.1", g.tlsPort()), fmt.Sprintf("https://m.test:%d/", g.tlsPort())}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, curl, args...).CombinedOutput(); err == nil {
		t.Errorf("curl without a client certificate succeeded: %s", out)
	}
	args = append(args, "--cert", writeFile(t, dir, "c.pem", cc), "--key", writeFile(t, dir, "c.key", ck))
	if out, err := exec.CommandContext(ctx, curl, args...).CombinedOutput(); err != nil || !strings.Contains(string(out), "proto=HTTP/1.1 xfp=https") {
		t.Errorf("curl with a client certificate: %v: %s", err, out)
	}
}

// TestTLSCertificateRotation: a secret replaced while a client sends calls
// over keep-alive connections (HTTP/1.1 and HTTP/2): no call fails, the
// open connections stay (every call after the first reuses its
// connection), and a new connection gets the new certificate.
func TestTLSCertificateRotation(t *testing.T) {
	ca := newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	res := twoHosts(t, ca, g.tlsPort(), u)
	cp.set(res...)
	serial := func(c *http.Client) (*big.Int, error) {
		resp, err := c.Get("https://a.test/")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("status %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber, nil
	}
	var old *big.Int
	waitFor(t, "TLS to serve", func() bool {
		s, err := serial(g.tlsClient(ca.pool, false))
		old = s
		return err == nil
	})

	type loop struct {
		calls, failed, newConns atomic.Int64
		lastErr                 atomic.Value
	}
	run := func(h2 bool, l *loop, stop <-chan struct{}, done chan<- struct{}) {
		defer close(done)
		c := g.tlsClient(ca.pool, h2)
		// One connection at most: Go's transport otherwise dials a second
		// one when a call starts before the last call's connection is back
		// in its idle pool (its read loop returns it), which a loaded
		// machine makes likely; only a connection the gateway closed makes
		// a new one then.
		c.Transport.(*http.Transport).MaxConnsPerHost = 1
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			if !i.Reused {
				l.newConns.Add(1)
			}
		}}
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; i < 20000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "https://a.test/r", nil)
			resp, err := c.Do(req)
			l.calls.Add(1)
			if err != nil {
				l.failed.Add(1)
				l.lastErr.Store(err.Error())
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				l.failed.Add(1)
				l.lastErr.Store(resp.Status)
			}
		}
	}
	var l1, l2 loop
	stop := make(chan struct{})
	d1, d2 := make(chan struct{}), make(chan struct{})
	go run(false, &l1, stop, d1)
	go run(true, &l2, stop, d2)
	waitFor(t, "calls before the rotation", func() bool { return l1.calls.Load() > 20 && l2.calls.Load() > 20 })

	nc, nk := ca.issue(t, false, "a.test")
	res[1] = certSecret("a-cert", nc, nk)
	cp.set(res...)
	var now *big.Int
	waitFor(t, "a new connection to see the new certificate", func() bool {
		s, err := serial(g.tlsClient(ca.pool, false))
		now = s
		return err == nil && s.Cmp(old) != 0
	})
	after1, after2 := l1.calls.Load(), l2.calls.Load()
	waitFor(t, "calls after the rotation", func() bool { return l1.calls.Load() > after1+20 && l2.calls.Load() > after2+20 })
	close(stop)
	<-d1
	<-d2
	for i, l := range []*loop{&l1, &l2} {
		if l.failed.Load() != 0 {
			t.Errorf("loop %d: %d of %d calls failed, last: %v", i, l.failed.Load(), l.calls.Load(), l.lastErr.Load())
		}
		if l.newConns.Load() != 1 {
			t.Errorf("loop %d: %d connections over %d calls: the rotation dropped the open one", i, l.newConns.Load(), l.calls.Load())
		}
	}
	if now.Cmp(old) == 0 {
		t.Error("the certificate did not change")
	}
}

// TestTLSBadInput: bytes that are not TLS, a malformed ClientHello, and a
// client that stops in the middle close their own connections only (plain
// HTTP after a 400 saying so); the gateway keeps serving and counts the
// failed handshakes.
func TestTLSBadInput(t *testing.T) {
	ca := newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	cp.set(twoHosts(t, ca, g.tlsPort(), u)...)
	c := g.tlsClient(ca.pool, false)
	ok := func() bool {
		resp, err := c.Get("https://a.test/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	waitFor(t, "TLS to serve", ok)
	before := metric(t, g, "sextant_gateway_tls_handshake_errors_total")
	inputs := map[string][]byte{
		"plain HTTP":        []byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"),
		"garbage":           bytes.Repeat([]byte{0xff, 0x00, 0x13}, 100),
		"short ClientHello": {0x16, 0x03, 0x01, 0x00, 0x30, 0x01, 0x00, 0x00, 0x2c, 0x03, 0x03, 0xde, 0xad},
		"bad ClientHello":   append([]byte{0x16, 0x03, 0x01, 0x00, 0x10}, bytes.Repeat([]byte{0x01}, 16)...),
	}
	for name, in := range inputs {
		conn, err := net.DialTimeout("tcp", g.tls, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(15 * time.Second))
		conn.Write(in)
		if name == "short ClientHello" {
			conn.(*net.TCPConn).CloseWrite() // the rest never comes
		}
		got, err := io.ReadAll(conn)
		conn.Close()
		var ne net.Error
		if err != nil && (!errorsAs(err, &ne) || ne.Timeout()) {
			t.Errorf("%s: the connection was not closed: %v", name, err)
		}
		// Plain HTTP is told what it did, as nginx and net/http tell it
		// (issue 50: it used to be closed in silence); nothing else is
		// answered in plaintext.
		if name == "plain HTTP" {
			if !bytes.HasPrefix(got, []byte("HTTP/1.1 400 ")) || !bytes.Contains(got, []byte("HTTP request to an HTTPS port")) {
				t.Errorf("%s: answered %q, want 400 HTTP request to an HTTPS port", name, got)
			}
		} else if bytes.Contains(got, []byte("HTTP/1.1")) {
			t.Errorf("%s: answered in plaintext: %q", name, got)
		}
		if !ok() {
			t.Fatalf("after %s: the gateway stopped serving", name)
		}
	}
	if after := metric(t, g, "sextant_gateway_tls_handshake_errors_total"); after-before != float64(len(inputs)) {
		t.Errorf("handshake errors: %v, then %v after %d bad connections", before, after, len(inputs))
	}
}

// metric reads one unlabelled series from the admin API's /metrics.
func metric(t *testing.T, g *gw, name string) float64 {
	t.Helper()
	resp, err := http.Get(g.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

func errorsAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// TestTLSConfigRefused: TLS settings the gateway cannot honour are NACKed
// naming the field, and the listener it serves stays.
func TestTLSConfigRefused(t *testing.T) {
	ca := newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	good := twoHosts(t, ca, g.tlsPort(), u)
	cp.set(good...)
	c := g.tlsClient(ca.pool, true)
	waitFor(t, "TLS to serve", func() bool {
		resp, err := c.Get("https://a.test/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	cases := map[string]struct {
		chain tlsChain
		want  string
	}{
		"alpn h3": {tlsChain{cert: "a-cert", mod: func(d *tlsv3.DownstreamTlsContext) { d.CommonTlsContext.AlpnProtocols = []string{"h3"} }},
			`common_tls_context.alpn_protocols[0]: "h3": not supported`},
		"client certificates without CA": {tlsChain{cert: "a-cert", mod: func(d *tlsv3.DownstreamTlsContext) { d.RequireClientCertificate = wrapperspb.Bool(true) }},
			"require_client_certificate: set without a validation context"},
		"SDS not over ADS": {tlsChain{cert: "a-cert", mod: func(d *tlsv3.DownstreamTlsContext) {
			d.CommonTlsContext.TlsCertificateSdsSecretConfigs[0].SdsConfig = nil
		}}, "tls_certificate_sds_secret_configs[0].sds_config: not supported"},
		"cipher suites": {tlsChain{cert: "a-cert", mod: func(d *tlsv3.DownstreamTlsContext) {
			d.CommonTlsContext.TlsParams.CipherSuites = []string{"ECDHE-RSA-AES128-SHA"}
		}}, "cipher_suites"},
	}
	for name, tc := range cases {
		bad := append([]types.Resource{tlsListener("gw-tls", g.tlsPort(), tc.chain)}, good[1:]...)
		cp.set(bad...)
		waitFor(t, name+" NACKed", func() bool { return strings.Contains(g.xds.Status().LastNACK, tc.want) })
		if st := g.xds.Status(); !strings.Contains(st.LastNACK, tc.want) || !strings.Contains(st.LastNACK, `Listener "gw-tls"`) {
			t.Errorf("%s: NACK %q, want it to name %q", name, st.LastNACK, tc.want)
		}
		resp, err := c.Get("https://a.test/")
		if err != nil {
			t.Fatalf("%s: the old listener stopped serving: %v", name, err)
		}
		resp.Body.Close()
	}
	// A secret whose key does not match its certificate is refused.
	cert, _ := ca.issue(t, false, "a.test")
	_, key := ca.issue(t, false, "a.test")
	bad := append([]types.Resource{}, good...)
	bad[1] = certSecret("a-cert", cert, key)
	cp.set(bad...)
	waitFor(t, "a mismatched key NACKed", func() bool { return strings.Contains(g.xds.Status().LastNACK, "Secret") })
	if st := g.xds.Status(); !strings.Contains(st.LastNACK, `Secret "a-cert"`) || !strings.Contains(st.LastNACK, "private key does not match public key") {
		t.Errorf("mismatched key: NACK %q", st.LastNACK)
	}
}

// TestWebSocketOverTLS: a gorilla/websocket client through the TLS
// listener (wss://) to a WebSocket endpoint.
func TestWebSocketOverTLS(t *testing.T) {
	ca := newPKI(t)
	u := startUpstream(t, "ws1", echoWS("ws1"))
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	cp.set(twoHosts(t, ca, g.tlsPort(), u)...)
	d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: ca.pool}, HandshakeTimeout: 10 * time.Second,
		NetDialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, network, g.tls)
		}}
	var conn *websocket.Conn
	waitFor(t, "wss to connect", func() bool {
		var err error
		conn, _, err = d.Dial("wss://a.test/ws", nil)
		return err == nil
	})
	defer conn.Close()
	for i := range 3 {
		msg := strings.Repeat("x", 1<<(4*i))
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := conn.ReadMessage()
		if err != nil || string(got) != "ws1:"+msg {
			t.Fatalf("echo %d: %v %.40q", i, err, got)
		}
	}
}

// TestH2LoadOverTLS: nghttp2's h2load, HTTP/2 over TLS with many streams
// per connection, a short smoke run: every request succeeds.
func TestH2LoadOverTLS(t *testing.T) {
	h2load, err := debian.Ensure("h2load", "nghttp2-client")
	if err != nil {
		t.Skip(err)
	}
	ca := newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	sc, sk := ca.issue(t, false, "127.0.0.1")
	cp.set(tlsListener("gw-tls", g.tlsPort(), tlsChain{cert: "any"}), certSecret("any", sc, sk),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "up"))), edsCluster("up"), assignment("up", ep{u: u}))
	c := g.tlsClient(ca.pool, true)
	waitFor(t, "TLS to serve", func() bool {
		resp, err := c.Get("https://127.0.0.1/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, h2load, "-n", "2000", "-c", "4", "-m", "16", "https://"+g.tls+"/h2load").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "2000 succeeded, 0 failed, 0 errored") || !strings.Contains(string(out), "Application protocol: h2") {
		t.Fatalf("h2load: %v\n%s", err, out)
	}
}
