package main

import (
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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/console/browsertest"
)

// clientCA is a CA for the services' client certificates, each with a
// SPIFFE ID as its URI SAN.
type clientCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newClientCA(t *testing.T) *clientCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "clients"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &clientCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *clientCA) issue(t *testing.T, id string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(id)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		URIs: []*url.URL{u}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// graphRouting: a Gateway whose HTTPS server verifies client
// certificates when given (OPTIONAL_MUTUAL), and a route per service.
func graphRouting(port int, chain []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: https, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: OPTIONAL_MUTUAL, credentialName: shop-cert}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [shop-gw]
  http:
`, port)
	for _, s := range chain {
		fmt.Fprintf(&b, "  - match: [{uri: {prefix: /%s}}]\n    route: [{destination: {host: %s}}]\n", s, s)
	}
	return b.String()
}

// TestConsoleServiceGraph: the service graph of real traffic in
// Chromium: five services run behind the real gateway, each calling the
// next through the gateway's HTTPS port with a client certificate of its
// own SPIFFE identity (the client calls the first without one), d failing
// a third of its calls. Within 5 s of the calls starting the console draws
// the chain from the gateway's call log: c -> d red, the others green, the
// client's edge without mutual TLS (dashed), the rest with it.
func TestConsoleServiceGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("browser")
	}
	tlsAddr := freeAddr(t)
	api, _, admin, server := startMeshWith(t, tlsAddr, 10*time.Second, func(f *gatewayFlags, server string) {
		f.registry, f.service = server, "sextant-gateway"
	})
	dir := t.TempDir()
	cert, key := testCert(t, dir, "shop", time.Now().Add(24*time.Hour), "shop.example.com")
	ca := newClientCA(t)
	caFile := filepath.Join(dir, "clients.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runOn(t, server, "", "secret", "create", "tls", "shop-cert", "--cert", cert, "--key", key, "--ca", caFile); err != nil {
		t.Fatalf("secret create: %v\n%s", err, out)
	}
	pool := x509.NewCertPool()
	pemBytes, _ := os.ReadFile(cert)
	pool.AppendCertsFromPEM(pemBytes)
	clientOf := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "shop.example.com", Certificates: certs},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, tlsAddr)
			}}}
	}
	chain := []string{"a", "b", "c", "d", "e"}
	var dCalls atomic.Int64
	var ports []string
	for i, s := range chain {
		next := ""
		if i+1 < len(chain) {
			next = chain[i+1]
		}
		c := clientOf(ca.issue(t, "spiffe://cluster.local/ns/default/sa/"+s))
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// 500, not 503: the route's default retry policy (Istio's)
			// retries a 503, and the next try would answer.
			if s == "d" && dCalls.Add(1)%3 == 0 {
				w.WriteHeader(500)
				return
			}
			if next != "" {
				if resp, err := c.Get("https://shop.example.com/" + next + "/"); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			io.WriteString(w, s)
		})}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		ports = append(ports, ln.Addr().String())
		if _, err := api.Register(context.Background(), client.Instance{ID: s + "-1", Service: s, Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port}); err != nil {
			t.Fatal(err)
		}
	}
	_, tp, _ := net.SplitHostPort(tlsAddr)
	var port int
	fmt.Sscan(tp, &port)
	if out, err := runOn(t, server, graphRouting(port, chain), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	anon := clientOf()
	// Ready without a call (a call would be in the graph before the
	// traffic starts): the gateway knows every service's endpoint and
	// serves the HTTPS port.
	waitTrue(t, 20*time.Second, func() bool {
		body := getJSON(t, "http://"+admin+"/v1/clusters")
		for _, p := range ports {
			if !strings.Contains(body, p) {
				return false
			}
		}
		c, err := tls.Dial("tcp", tlsAddr, &tls.Config{RootCAs: pool, ServerName: "shop.example.com"})
		if err != nil {
			return false
		}
		c.Close()
		return true
	})

	b := browsertest.Start(t)
	b.Navigate(t, server+"/ui/#/graph")
	b.WaitTrue(t, 15*time.Second, "an empty graph", `document.querySelector('#graph-gateway') && document.querySelector('#graph-gateway').value !== ''
		&& document.querySelector('main .empty') && document.querySelector('main .empty').textContent.includes('No calls')`)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if resp, err := anon.Get("https://shop.example.com/a/"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	start := time.Now()
	b.WaitTrue(t, 5*time.Second, "the chain drawn", `(() => {
		const e = (s, d) => document.querySelector('#service-graph g.edge[data-source="' + s + '"][data-destination="' + d + '"]');
		return e('unknown', 'default/a') && e('default/a', 'default/b') && e('default/b', 'default/c') && e('default/c', 'default/d') && e('default/d', 'default/e');
	})()`)
	t.Logf("the chain appeared %v after the calls started", time.Since(start).Round(10*time.Millisecond))
	b.WaitTrue(t, 10*time.Second, "edge colors and mutual TLS", `(() => {
		const e = (s, d) => document.querySelector('#service-graph g.edge[data-source="' + s + '"][data-destination="' + d + '"]');
		return e('default/c', 'default/d').classList.contains('edge-bad')
			&& ['default/a/default/b', 'default/b/default/c', 'default/d/default/e'].every(k => { const [a1, a2, b1, b2] = k.split('/'); return e(a1 + '/' + a2, b1 + '/' + b2).classList.contains('edge-ok') && e(a1 + '/' + a2, b1 + '/' + b2).dataset.mtls === '1'; })
			&& e('unknown', 'default/a').dataset.mtls === '0' && e('unknown', 'default/a').querySelector('path').classList.contains('plain');
	})()`)
	// Left to right along the chain.
	xs := browsertest.Eval[[]float64](t, b, `['unknown', 'default/a', 'default/b', 'default/c', 'default/d', 'default/e'].map(id =>
		document.querySelector('#service-graph g.node[data-id="' + id + '"]').getBoundingClientRect().left)`)
	for i := 1; i < len(xs); i++ {
		if xs[i] <= xs[i-1] {
			t.Errorf("nodes not left to right along the chain: %v", xs)
		}
	}
	b.Layout(t, "graph.png")
	b.NoProblems(t, "graph")
	// An edge opens its destination's calls.
	b.Click(t, `#service-graph g.edge[data-destination="default/d"] a`)
	b.WaitTrue(t, 10*time.Second, "the failing edge's calls", `location.hash.startsWith('#/calls') && location.hash.includes('default%2Fd')`)
}
