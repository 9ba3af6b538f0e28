package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"time"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// ConsulServiceURI is the identity Consul's Connect gives a service,
// spiffe://TRUST_DOMAIN/ns/NAMESPACE/dc/DATACENTER/svc/NAME: Consul's
// clients read a leaf's service from this form, not from Sextant's
// /ns/NAMESPACE/sa/NAME.
func ConsulServiceURI(td, ns, dc, service string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: td, Path: "/ns/" + ns + "/dc/" + dc + "/svc/" + service}
}

// SignConsulService makes an ECDSA P-256 key and issues it a certificate
// naming ConsulServiceURI for ttl (the default lifetime if 0), signed as
// every workload certificate is, so it chains to the same bundle. It
// returns the key as PKCS#8 PEM; the Issued's ID is zero (the identity is
// not of Sextant's form).
func (a *Authority) SignConsulService(ns, dc, service string, ttl time.Duration) (*Issued, []byte, error) {
	for _, p := range []struct{ what, v string }{{"namespace", ns}, {"datacenter", dc}, {"service", service}} {
		if !naming.ValidName(p.v) {
			return nil, nil, fmt.Errorf("ca: %w: %s %q is not a valid name ([a-z0-9-._], starting and ending with a letter or digit)", ErrInvalid, p.what, p.v)
		}
	}
	if ttl == 0 {
		ttl = a.opts.TTL
	}
	if ttl < time.Minute || ttl > a.opts.MaxTTL {
		return nil, nil, fmt.Errorf("ca: %w: lifetime %v must be between 1m and %v", ErrInvalid, ttl, a.opts.MaxTTL)
	}
	uri := ConsulServiceURI(a.opts.TrustDomain, ns, dc, service)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: generate a key for %s: %w", uri, err)
	}
	is, err := a.issue(key.Public(), uri, a.opts.TrustDomain, ttl)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: sign %s: %w", uri, err)
	}
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: encode the key of %s: %w", uri, err)
	}
	return is, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k}), nil
}
