package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestServerTLSSuites: with --tls-cert, the HTTP API, xDS and the Consul
// API offer Mozilla's intermediate suites under TLS 1.2: a real client
// offering only CBC with SHA-1 fails the handshake on each (Go's defaults
// accepted it), one offering AES-GCM succeeds.
func TestServerTLSSuites(t *testing.T) {
	certs := apitest.NewCerts(t)
	addr, xaddr, consul, data := freeAddr(t), freeAddr(t), freeAddr(t), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverFlags{data: data, http: addr, xds: xaddr, consulAPI: consul, consulNamespace: "default",
			tlsCert: certs.ServerCert, tlsKey: certs.ServerKey,
			logFormat: "text", logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second, auditLog: "off"})
	}()
	t.Cleanup(func() { cancel(); <-done })
	pem, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	dial := func(at string, suite uint16) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", at,
			&tls.Config{ServerName: "127.0.0.1", RootCAs: pool, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite},
				NextProtos: []string{"h2"}})
		if err == nil {
			c.Close()
		}
		return err
	}
	waitTrue(t, 20*time.Second, func() bool { return dial(consul, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256) == nil })
	for name, at := range map[string]string{"http": addr, "xds": xaddr, "consul": consul} {
		for _, s := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA} {
			if err := dial(at, s); err == nil {
				t.Errorf("%s: %s: handshake succeeded", name, tls.CipherSuiteName(s))
			}
		}
		for _, s := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
			if err := dial(at, s); err != nil {
				t.Errorf("%s: %s: %v", name, tls.CipherSuiteName(s), err)
			}
		}
	}
}
