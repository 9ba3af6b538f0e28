package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"
)

func csrFor(t testing.TB, key any, uris ...string) []byte {
	t.Helper()
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "w"}}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func p256(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pool(pemCerts []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pemCerts)
	return p
}

// verify checks that chainPEM verifies against bundle as a client and as
// a server certificate and carries exactly id.
func verify(t *testing.T, chainPEM, bundle []byte, id ID) {
	t.Helper()
	var certs []*x509.Certificate
	for rest := chainPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool(bundle), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Fatalf("verify as %v: %v", usage, err)
		}
	}
	if len(certs[0].URIs) != 1 || certs[0].URIs[0].String() != id.String() {
		t.Fatalf("URIs = %v, want [%s]", certs[0].URIs, id)
	}
	if certs[0].IsCA {
		t.Fatal("a workload certificate is a CA")
	}
}

func TestSignIssuesAVerifiableSPIFFECertificate(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	a, err := Generate(Options{TrustDomain: "cluster.local", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	id := ID{TrustDomain: "cluster.local", Namespace: "orders", Account: "api"}
	is, err := a.Sign(csrFor(t, p256(t), id.String()), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := is.Leaf.NotAfter, now.Add(DefaultTTL); !got.Equal(want) {
		t.Fatalf("NotAfter = %v, want %v (the default lifetime)", got, want)
	}
	if strings.Count(string(is.ChainPEM), "BEGIN CERTIFICATE") != 1 {
		t.Fatalf("a root-signed leaf's chain holds %d certificates, want the leaf alone", strings.Count(string(is.ChainPEM), "BEGIN"))
	}
	// A CSR that names no URI gets the identity it was authorised for.
	if _, err := a.Sign(csrFor(t, p256(t)), id, time.Hour); err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(is.ChainPEM)
	c, _ := x509.ParseCertificate(b.Bytes)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(a.Bundle()), CurrentTime: now.Add(time.Minute), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(a.Bundle()), CurrentTime: now.Add(DefaultTTL + time.Second), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Fatal("the certificate verifies after its lifetime")
	}
}

func TestSignRefusesWhatItMayNotSign(t *testing.T) {
	a, err := Generate(Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	id := ID{TrustDomain: "cluster.local", Namespace: "orders", Account: "api"}
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	good := csrFor(t, p256(t))
	tampered := []byte(strings.Replace(string(good), string(good[70:74]), "AAAA", 1))
	for _, c := range []struct {
		name string
		csr  []byte
		id   ID
		ttl  time.Duration
		want string
	}{
		{"other identity in the CSR", csrFor(t, p256(t), "spiffe://cluster.local/ns/billing/sa/api"), id, 0, "may name only"},
		{"two URIs", csrFor(t, p256(t), id.String(), id.String()), id, 0, "may name only"},
		{"other trust domain", good, ID{TrustDomain: "evil.local", Namespace: "orders", Account: "api"}, 0, "outside the trust domain"},
		{"bad namespace", good, ID{TrustDomain: "cluster.local", Namespace: "Orders", Account: "api"}, 0, "namespace"},
		{"ed25519 key", csrFor(t, edKey), id, 0, "want ECDSA P-256"},
		{"P-384 key", csrFor(t, p384), id, 0, "ECDSA P-384"},
		{"not PEM", []byte("hello"), id, 0, "no PEM block"},
		{"wrong block", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), id, 0, "want CERTIFICATE REQUEST"},
		{"garbage DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{0x30, 1, 2}}), id, 0, "CSR:"},
		{"tampered", tampered, id, 0, "CSR"},
		{"lifetime too long", good, id, 30 * 24 * time.Hour, "lifetime"},
		{"lifetime too short", good, id, time.Second, "lifetime"},
	} {
		_, err := a.Sign(c.csr, c.id, c.ttl)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalid naming %q", c.name, err, c.want)
		}
	}
}

func TestParseID(t *testing.T) {
	id, err := ParseID("spiffe://cluster.local/ns/orders/sa/api")
	if err != nil || id != (ID{"cluster.local", "orders", "api"}) {
		t.Fatalf("ParseID = %v, %v", id, err)
	}
	for _, s := range []string{"http://cluster.local/ns/a/sa/b", "spiffe://cluster.local/ns/a", "spiffe://cluster.local/sa/a/ns/b",
		"spiffe://Cluster.local/ns/a/sa/b", "spiffe:///ns/a/sa/b", "spiffe://c/ns/a/sa/b/c", "spiffe://c/ns//sa/b"} {
		if _, err := ParseID(s); err == nil {
			t.Errorf("ParseID(%q) accepted", s)
		}
	}
}

func TestRotationTrustsOldAndNewUntilPruned(t *testing.T) {
	now := time.Now()
	a, err := Generate(Options{TrustDomain: "cluster.local", MaxTTL: 48 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	id := ID{TrustDomain: "cluster.local", Namespace: "orders", Account: "api"}
	before, err := a.Sign(csrFor(t, p256(t)), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	oldBundle := a.Bundle()
	if err := a.Rotate(nil, nil); err != nil {
		t.Fatal(err)
	}
	after, err := a.Sign(csrFor(t, p256(t)), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before.Leaf.AuthorityKeyId, after.Leaf.AuthorityKeyId) {
		t.Fatal("the rotated authority signs with the old root")
	}
	// Both certificates verify against the bundle during the rotation:
	// this is what a TLS peer with the new bundle checks.
	verify(t, before.ChainPEM, a.Bundle(), id)
	verify(t, after.ChainPEM, a.Bundle(), id)
	// A peer that has not picked up the new bundle yet verifies the new
	// certificate through the cross certificate sent with it.
	verify(t, after.ChainPEM, oldBundle, id)
	st, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	restored, err := Restore(Options{TrustDomain: "cluster.local", MaxTTL: 48 * time.Hour, Now: func() time.Time { return now }}, st)
	if err != nil {
		t.Fatal(err)
	}
	again, err := restored.Sign(csrFor(t, p256(t)), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, again.ChainPEM, oldBundle, id)
	if a.Prune() {
		t.Fatal("pruned a root whose certificates may still be in use")
	}
	now = now.Add(49 * time.Hour)
	if !a.Prune() || len(a.Roots()) != 1 {
		t.Fatalf("after the longest lifetime the old root is still trusted: %d roots", len(a.Roots()))
	}
	pruned, err := a.Sign(csrFor(t, p256(t)), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(pruned.ChainPEM), "BEGIN CERTIFICATE"); n != 1 {
		t.Fatalf("after the prune a certificate comes with %d certificates, want the leaf alone (no cross certificate)", n)
	}
}

func TestFromPEMWithAnIntermediateAndStateRoundTrip(t *testing.T) {
	rootKey, interKey := p256(t), p256(t)
	rootTmpl := &x509.Certificate{SerialNumber: bigOne(), Subject: pkix.Name{CommonName: "user root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour * 24 * 365),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	rootDER, _ := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	root, _ := x509.ParseCertificate(rootDER)
	interTmpl := &x509.Certificate{SerialNumber: bigOne(), Subject: pkix.Name{CommonName: "user intermediate"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour * 24 * 30),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	interDER, _ := x509.CreateCertificate(rand.Reader, interTmpl, root, &interKey.PublicKey, rootKey)
	certPEM := func(ders ...[]byte) []byte {
		var out []byte
		for _, d := range ders {
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d})...)
		}
		return out
	}
	keyPEM := func(k *ecdsa.PrivateKey) []byte {
		der, _ := x509.MarshalECPrivateKey(k)
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	}
	opts := Options{TrustDomain: "example.org"}
	a, err := FromPEM(opts, certPEM(interDER, rootDER), keyPEM(interKey))
	if err != nil {
		t.Fatal(err)
	}
	id := ID{TrustDomain: "example.org", Namespace: "orders", Account: "api"}
	is, err := a.Sign(csrFor(t, p256(t)), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(is.ChainPEM), "BEGIN CERTIFICATE"); n != 2 {
		t.Fatalf("chain holds %d certificates, want leaf + intermediate", n)
	}
	if !a.Roots()[0].Equal(root) {
		t.Fatal("the bundle's root is not the user's root")
	}
	verify(t, is.ChainPEM, a.Bundle(), id)

	st, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Restore(opts, st)
	if err != nil {
		t.Fatal(err)
	}
	is2, err := b.Sign(csrFor(t, p256(t)), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, is2.ChainPEM, a.Bundle(), id)
	if _, err := Restore(Options{TrustDomain: "other.org"}, st); err == nil {
		t.Fatal("restored under another trust domain")
	}

	// What a user may get wrong, each named.
	for _, c := range []struct {
		name       string
		chain, key []byte
		want       string
	}{
		{"key of another certificate", certPEM(interDER, rootDER), keyPEM(rootKey), "does not match"},
		{"chain without its root", certPEM(interDER), keyPEM(interKey), "self-signed root"},
		{"no certificate", []byte("x"), keyPEM(interKey), "no PEM CERTIFICATE"},
		{"no key", certPEM(rootDER), []byte("x"), "no PEM block in the key"},
	} {
		if _, err := FromPEM(opts, c.chain, c.key); err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalid naming %q", c.name, err, c.want)
		}
	}
	// A workload's certificate with its own key is not a CA.
	leafKey := p256(t)
	lis, _ := a.Sign(csrFor(t, leafKey), id, 0)
	lkeyDER, _ := x509.MarshalPKCS8PrivateKey(leafKey)
	_, err = FromPEM(opts, append(lis.ChainPEM, certPEM(rootDER)...), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: lkeyDER}))
	if err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Fatalf("a leaf as signer: err = %v, want 'not a CA'", err)
	}
}

func bigOne() *big.Int { return big.NewInt(1) }

// TestIssuedCertificatesTalkMutualTLS is the point of it all: two
// workloads holding certificates from the authority, each trusting its
// bundle, complete a mutual TLS handshake and see each other's identity.
func TestIssuedCertificatesTalkMutualTLS(t *testing.T) {
	a, err := Generate(Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(ns, sa string) (tls.Certificate, ID) {
		id := ID{TrustDomain: "cluster.local", Namespace: ns, Account: sa}
		k := p256(t)
		is, err := a.Sign(csrFor(t, k), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalPKCS8PrivateKey(k)
		c, err := tls.X509KeyPair(is.ChainPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
		if err != nil {
			t.Fatal(err)
		}
		return c, id
	}
	srvCert, _ := mk("orders", "api")
	cliCert, cliID := mk("web", "frontend")
	roots := pool(a.Bundle())
	srv := &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert}
	cli := &tls.Config{Certificates: []tls.Certificate{cliCert}, RootCAs: roots, InsecureSkipVerify: true,
		// SPIFFE peers are named by URI, not DNS: verify the chain, then the ID.
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			c, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			_, err = c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			return err
		}}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			got <- err.Error()
			return
		}
		got <- tc.ConnectionState().PeerCertificates[0].URIs[0].String()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case s := <-got:
		if s != cliID.String() {
			t.Fatalf("server saw %q, want %s", s, cliID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no handshake in 30s")
	}
}

// TestSignConsulService: a Consul leaf names Consul's service URI alone,
// verifies against the authority's roots, and a name Sextant cannot hold
// is refused naming it.
func TestSignConsulService(t *testing.T) {
	a, err := Generate(Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	is, keyPEM, err := a.SignConsulService("default", "dc1", "web", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := is.Leaf.URIs; len(got) != 1 || got[0].String() != "spiffe://cluster.local/ns/default/dc/dc1/svc/web" {
		t.Fatalf("URIs %v, want Consul's service URI alone", got)
	}
	if _, err := tls.X509KeyPair(is.ChainPEM, keyPEM); err != nil {
		t.Fatalf("the key does not match the certificate: %v", err)
	}
	roots := x509.NewCertPool()
	for _, r := range a.Roots() {
		roots.AddCert(r)
	}
	if _, err := is.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the leaf does not chain to the authority's roots: %v", err)
	}
	if _, _, err := a.SignConsulService("default", "dc1", "Web!", 0); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `service "Web!"`) {
		t.Fatalf("a bad service name: %v, want ErrInvalid naming it", err)
	}
}
