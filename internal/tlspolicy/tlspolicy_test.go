package tlspolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
)

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestServerRefusesWeakSuites: a real TLS 1.2 client offering only a CBC
// suite (SHA-1 or SHA-256 MAC), or only RSA key exchange, fails the
// handshake; one offering an intermediate suite, or TLS 1.3, succeeds; a
// client stuck at TLS 1.1 fails.
func TestServerRefusesWeakSuites(t *testing.T) {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", Server(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	for _, c := range []struct {
		name     string
		suite    uint16
		min, max uint16
		ok       bool
	}{
		{"ECDHE-ECDSA-AES128-SHA", tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.VersionTLS12, tls.VersionTLS12, false},
		{"ECDHE-ECDSA-AES256-SHA", tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.VersionTLS12, tls.VersionTLS12, false},
		{"ECDHE-ECDSA-AES128-SHA256", tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, tls.VersionTLS12, tls.VersionTLS12, false},
		{"AES128-GCM-SHA256 (RSA kx)", tls.TLS_RSA_WITH_AES_128_GCM_SHA256, tls.VersionTLS12, tls.VersionTLS12, false},
		{"TLS 1.1", tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.VersionTLS10, tls.VersionTLS11, false},
		{"ECDHE-ECDSA-AES128-GCM-SHA256", tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.VersionTLS12, tls.VersionTLS12, true},
		{"ECDHE-ECDSA-CHACHA20-POLY1305", tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.VersionTLS12, tls.VersionTLS12, true},
		{"TLS 1.3", 0, tls.VersionTLS13, tls.VersionTLS13, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf := &tls.Config{InsecureSkipVerify: true, MinVersion: c.min, MaxVersion: c.max} //nolint:gosec // a self-signed test server
			if c.suite != 0 {
				conf.CipherSuites = []uint16{c.suite}
			}
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), conf)
			if err == nil {
				conn.Close()
			}
			if (err == nil) != c.ok {
				t.Fatalf("handshake error %v, want success %v", err, c.ok)
			}
		})
	}
}
