package ca

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net/url"
	"testing"
	"time"
)

// BenchmarkSign is the CA's signing path: parse and check the CSR, sign
// a leaf with the root's key, encode the chain. Compare with
// BenchmarkX509Floor, the crypto/x509 calls alone.
func BenchmarkSign(b *testing.B) {
	a, err := Generate(Options{TrustDomain: "cluster.local"})
	if err != nil {
		b.Fatal(err)
	}
	csr := csrFor(b, p256(b))
	id := ID{TrustDomain: "cluster.local", Namespace: "orders", Account: "api"}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := a.Sign(csr, id, 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "certs/s")
}

// BenchmarkX509Floor is what any Go CA pays per certificate: parse the
// CSR, verify its signature, create and sign the certificate.
func BenchmarkX509Floor(b *testing.B) {
	a, err := Generate(Options{TrustDomain: "cluster.local"})
	if err != nil {
		b.Fatal(err)
	}
	blk, _ := pem.Decode(csrFor(b, p256(b)))
	id := ID{TrustDomain: "cluster.local", Namespace: "orders", Account: "api"}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			csr, err := x509.ParseCertificateRequest(blk.Bytes)
			if err != nil || csr.CheckSignature() != nil {
				b.Error("csr")
				return
			}
			serial, _ := newSerial()
			tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{Organization: []string{"cluster.local"}},
				NotBefore: time.Now(), NotAfter: time.Now().Add(DefaultTTL), URIs: []*url.URL{id.URL()},
				KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
			if _, err := x509.CreateCertificate(rand.Reader, tmpl, a.signer.chain[0], csr.PublicKey, a.signer.key); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "certs/s")
}
