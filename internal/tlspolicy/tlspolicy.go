// Package tlspolicy is the TLS every Sextant server offers its clients:
// Mozilla's "intermediate" configuration (TLS 1.2 with ECDHE and an AEAD
// cipher, and TLS 1.3), in one place so that the HTTP API, xDS, the
// Consul API and the gateway's TLS listeners agree. Go's own defaults
// still offer CBC suites with SHA-1 MACs under TLS 1.2 (issue 42).
package tlspolicy

import "crypto/tls"

// cipherSuites are Mozilla's intermediate TLS 1.2 suites that Go
// implements (its DHE suites Go has not), in Mozilla's order. TLS 1.3's
// suites are not configurable in Go and are all AEAD.
var cipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// CipherSuites returns the TLS 1.2 suites a server offers (a new slice).
func CipherSuites() []uint16 { return append([]uint16(nil), cipherSuites...) }

// Server gives c, a server's config, the policy's TLS 1.2 suites, and TLS
// 1.2 as its lowest version unless c asks for a higher one; it returns c.
func Server(c *tls.Config) *tls.Config {
	c.CipherSuites = CipherSuites()
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	return c
}
