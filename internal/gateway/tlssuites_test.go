package gateway_test

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// TestTLSOffersIntermediateSuites: the gateway's TLS listeners offer
// Mozilla's intermediate suites under TLS 1.2: a real client offering only
// a CBC suite with a SHA-1 MAC fails the handshake (Go's defaults accepted
// it), one offering AES-GCM succeeds.
func TestTLSOffersIntermediateSuites(t *testing.T) {
	ca := newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	cp.set(twoHosts(t, ca, g.tlsPort(), u)...)
	waitFor(t, "a.test over TLS", func() bool {
		resp, err := g.tlsClient(ca.pool, false).Get("https://a.test/x")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	dial := func(suite uint16) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", g.tls,
			&tls.Config{ServerName: "a.test", RootCAs: ca.pool, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}})
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, s := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA} {
		if err := dial(s); err == nil {
			t.Errorf("%s: handshake succeeded", tls.CipherSuiteName(s))
		}
	}
	for _, s := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		if err := dial(s); err != nil {
			t.Errorf("%s: %v", tls.CipherSuiteName(s), err)
		}
	}
}
