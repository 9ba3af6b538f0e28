package apitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs is a test PKI made with crypto/x509: a CA, a server certificate
// for 127.0.0.1 and localhost, and a client certificate, as PEM files in
// a temp dir and as tls.Configs.
type Certs struct {
	CAFile, ServerCert, ServerKey, ClientCert, ClientKey string

	pool   *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

// NewCerts makes a fresh PKI for one test.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sextant test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	c := &Certs{pool: x509.NewCertPool()}
	c.pool.AddCert(ca)
	c.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (certFile, keyFile string, pair tls.Certificate) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile = writePEM(t, dir, name+".pem", "CERTIFICATE", der)
		keyFile = writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", kder)
		pair, err = tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return certFile, keyFile, pair
	}
	c.ServerCert, c.ServerKey, c.server = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey, c.client = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return c
}

// ServerTLS is the server's config; mutual requires client certificates
// signed by the CA.
func (c *Certs) ServerTLS(mutual bool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{c.server}, MinVersion: tls.VersionTLS12}
	if mutual {
		cfg.ClientCAs = c.pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg
}

// ClientTLS trusts the CA and, with cert, presents the client certificate.
func (c *Certs) ClientTLS(cert bool) *tls.Config {
	cfg := &tls.Config{RootCAs: c.pool, MinVersion: tls.VersionTLS12}
	if cert {
		cfg.Certificates = []tls.Certificate{c.client}
	}
	return cfg
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
