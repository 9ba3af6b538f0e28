package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"
)

// SignNewKey makes an ECDSA P-256 key and issues a certificate for id to
// it (see Sign), for a caller that hands both to the workload: the server
// serving Envoy's SDS secret "default" (internal/xds). It returns the key
// as PKCS#8 PEM.
func (a *Authority) SignNewKey(id ID, ttl time.Duration) (*Issued, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: generate a key for %s: %w", id, err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: CSR for %s: %w", id, err)
	}
	is, err := a.Sign(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), id, ttl)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: encode the key of %s: %w", id, err)
	}
	return is, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k}), nil
}
