// Package secret owns the secret record kind: TLS certificates with their
// private keys (and, for mutual TLS, the CA that verifies clients), stored
// by the server as records of store.Secrets and handed to gateways over SDS,
// as Istio reads a Gateway's credentialName from a Kubernetes TLS secret.
// It decodes and validates secrets (the PEM parses, the key matches the
// certificate, the certificate is not expired), keeps them in a catalog
// table and writes them through the write engine, their private keys
// sealed as stored (internal/seal) when the table was given a key.
//
// It does not own who may read them (the API checks the ACL resource
// "secret"; only metadata is ever answered) nor their translation into
// Envoy resources (internal/xds).
package secret

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/seal"
)

// The secret types. TypeTLS is a certificate chain and its key (and an
// optional CA), as Kubernetes' kubernetes.io/tls; TypeCA is CA
// certificates only, as a Kubernetes generic secret with just ca.crt (what
// a DestinationRule's credentialName names for tls.mode SIMPLE).
const (
	TypeTLS = "tls"
	TypeCA  = "ca"
)

// MaxPEMBytes bounds each PEM field.
const MaxPEMBytes = 64 << 10

// Sentinels the package's errors wrap; the API branches on them.
var (
	ErrInvalid  = errors.New("invalid secret")
	ErrNotFound = errors.New("no such secret")
	ErrExists   = errors.New("secret exists")
	ErrStale    = errors.New("secret changed")
)

// FieldError names the field of a refused secret.
type FieldError struct {
	Field, Msg string
}

func (e *FieldError) Error() string { return "secret: " + e.Field + ": " + e.Msg }
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Secret is one stored secret. Immutable once decoded.
type Secret struct {
	Namespace string
	Name      string
	Type      string
	Cert      []byte // PEM: the leaf first, then intermediates
	Key       []byte // PEM private key
	CA        []byte // PEM: CAs that verify client certificates (ca.crt); may be empty
	Revision  int64

	info Info
	// sealedWith is the id of the key the stored record's private key is
	// sealed with (internal/seal), "" when it is stored plain.
	sealedWith string
}

// Info is what may be shown of a secret: never the key, never the PEM.
type Info struct {
	Namespace   string    `json:"namespace"`
	Name        string    `json:"name"`
	Type        string    `json:"type"`
	Subject     string    `json:"subject"`
	Issuer      string    `json:"issuer"`
	DNSNames    []string  `json:"dns_names"`
	IPAddresses []string  `json:"ip_addresses,omitempty"`
	NotBefore   time.Time `json:"not_before"`
	NotAfter    time.Time `json:"not_after"`
	// Fingerprint is the SHA-256 of the leaf certificate's DER, in hex.
	Fingerprint string `json:"fingerprint_sha256"`
	KeyType     string `json:"key_type"`
	Chain       int    `json:"chain_certificates"`
	// CA: certificates in ca.crt (0: no mutual TLS with this secret).
	CA       int   `json:"ca_certificates"`
	Revision int64 `json:"revision"`
}

// ID is the secret's record key: "namespace/name".
func (s *Secret) ID() string { return s.Namespace + "/" + s.Name }

// Info returns the secret's metadata.
func (s *Secret) Info() Info {
	i := s.info
	i.Revision = s.Revision
	return i
}

// New checks a secret's names and PEM and returns it with its metadata:
// the certificate chain and the key parse, the key matches the leaf, the
// leaf is valid at now, the CA (optional) parses.
func New(namespace, name string, certPEM, keyPEM, caPEM []byte, now time.Time) (*Secret, error) {
	if !naming.ValidName(namespace) {
		return nil, fieldErr("namespace", "%q is not a valid name (lower case letters, digits and '-', at most 63)", namespace)
	}
	if !naming.ValidName(name) {
		return nil, fieldErr("name", "%q is not a valid name (lower case letters, digits and '-', at most 63)", name)
	}
	s := &Secret{Namespace: namespace, Name: name, Type: TypeTLS, Cert: certPEM, Key: keyPEM, CA: caPEM}
	if err := s.check(now); err != nil {
		return nil, err
	}
	return s, nil
}

// NewCA checks a CA-only secret's names and PEM: at least one
// certificate, each one valid at now.
func NewCA(namespace, name string, caPEM []byte, now time.Time) (*Secret, error) {
	if !naming.ValidName(namespace) {
		return nil, fieldErr("namespace", "%q is not a valid name (lower case letters, digits and '-', at most 63)", namespace)
	}
	if !naming.ValidName(name) {
		return nil, fieldErr("name", "%q is not a valid name (lower case letters, digits and '-', at most 63)", name)
	}
	s := &Secret{Namespace: namespace, Name: name, Type: TypeCA, CA: caPEM}
	if err := s.check(now); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Secret) check(now time.Time) error {
	for f, b := range map[string][]byte{"cert": s.Cert, "key": s.Key, "ca": s.CA} {
		if len(b) > MaxPEMBytes {
			return fieldErr(f, "%d bytes, more than %d", len(b), MaxPEMBytes)
		}
	}
	if s.Type == TypeCA {
		return s.checkCA(now)
	}
	chain, err := certificates("cert", s.Cert)
	if err != nil {
		return err
	}
	if len(chain) == 0 {
		return fieldErr("cert", "no PEM CERTIFICATE block")
	}
	if err := keyBlock(s.Key); err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(s.Cert, s.Key)
	if err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "tls: ")
		if strings.Contains(msg, "does not match") {
			return fieldErr("key", "the private key does not match the certificate's public key")
		}
		return fieldErr("key", "%s", msg)
	}
	leaf := chain[0]
	if now.After(leaf.NotAfter) {
		return fieldErr("cert", "the certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return fieldErr("cert", "the certificate is not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	var cas []*x509.Certificate
	if len(bytes.TrimSpace(s.CA)) > 0 {
		if cas, err = certificates("ca", s.CA); err != nil {
			return err
		}
		if len(cas) == 0 {
			return fieldErr("ca", "no PEM CERTIFICATE block")
		}
	}
	sum := sha256.Sum256(leaf.Raw)
	s.info = Info{Namespace: s.Namespace, Name: s.Name, Type: s.Type, Subject: leaf.Subject.String(), Issuer: leaf.Issuer.String(),
		DNSNames: slices.Clone(leaf.DNSNames), NotBefore: leaf.NotBefore.UTC(), NotAfter: leaf.NotAfter.UTC(),
		Fingerprint: hex.EncodeToString(sum[:]), KeyType: keyType(pair), Chain: len(chain), CA: len(cas)}
	if s.info.DNSNames == nil {
		s.info.DNSNames = []string{}
	}
	for _, ip := range leaf.IPAddresses {
		s.info.IPAddresses = append(s.info.IPAddresses, ip.String())
	}
	return nil
}

// checkCA checks a CA-only secret (each certificate valid at now, unless
// now is zero); its metadata is its first certificate's.
func (s *Secret) checkCA(now time.Time) error {
	if len(s.Cert)+len(s.Key) > 0 {
		return fieldErr("cert", "a ca secret holds CA certificates only (create a tls secret for a certificate and key)")
	}
	cas, err := certificates("ca", s.CA)
	if err != nil {
		return err
	}
	if len(cas) == 0 {
		return fieldErr("ca", "no PEM CERTIFICATE block")
	}
	for i, c := range cas {
		switch {
		case now.IsZero():
		case now.After(c.NotAfter):
			return fieldErr("ca", "certificate %d (%s) expired at %s", i+1, c.Subject, c.NotAfter.UTC().Format(time.RFC3339))
		case now.Before(c.NotBefore):
			return fieldErr("ca", "certificate %d (%s) is not valid before %s", i+1, c.Subject, c.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	c := cas[0]
	sum := sha256.Sum256(c.Raw)
	s.info = Info{Namespace: s.Namespace, Name: s.Name, Type: s.Type, Subject: c.Subject.String(), Issuer: c.Issuer.String(),
		DNSNames: []string{}, NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC(),
		Fingerprint: hex.EncodeToString(sum[:]), CA: len(cas)}
	return nil
}

// certificates parses every PEM block of b, which must all be
// certificates.
func certificates(field string, b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := b
	for i := 0; ; i++ {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			if len(bytes.TrimSpace(rest)) > 0 && len(out) == 0 {
				return nil, fieldErr(field, "not PEM")
			}
			return out, nil
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fieldErr(field, "PEM block %d is a %q, want CERTIFICATE", i+1, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fieldErr(field, "certificate %d: %v", i+1, strings.TrimPrefix(err.Error(), "x509: "))
		}
		out = append(out, c)
	}
}

func keyBlock(b []byte) error {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return fieldErr("key", "not PEM")
	}
	if !strings.HasSuffix(blk.Type, "PRIVATE KEY") {
		return fieldErr("key", "PEM block is a %q, want a PRIVATE KEY", blk.Type)
	}
	return nil
}

func keyType(c tls.Certificate) string {
	leaf := c.Leaf
	if leaf == nil {
		return ""
	}
	switch leaf.PublicKeyAlgorithm {
	case x509.ECDSA:
		return "ECDSA"
	case x509.RSA:
		return "RSA"
	case x509.Ed25519:
		return "Ed25519"
	}
	return leaf.PublicKeyAlgorithm.String()
}

// record is a secret's stored encoding.
type record struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	Cert      string `json:"cert"`
	Key       string `json:"key"`
	CA        string `json:"ca,omitempty"`
	// KeySealed is Key sealed (internal/seal), Key then empty.
	KeySealed string `json:"key_sealed,omitempty"`
}

// Encode returns the secret's stored form, its key plain: what two
// versions are compared by.
func (s *Secret) Encode() []byte {
	b, _ := json.Marshal(record{Namespace: s.Namespace, Name: s.Name, Type: s.Type, Cert: string(s.Cert), Key: string(s.Key), CA: string(s.CA)})
	return b
}

// Decode reads a stored secret. A stored secret is not refused for having
// expired since it was written: it is kept, and its expiry shown.
func Decode(b []byte, rev int64) (*Secret, error) { return decode(b, rev, nil) }

// decode reads a stored secret, opening its sealed key with keys.
func decode(b []byte, rev int64, keys *seal.Keyring) (*Secret, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("secret: decode record: %w", err)
	}
	s := &Secret{Namespace: r.Namespace, Name: r.Name, Type: r.Type, Cert: []byte(r.Cert), Key: []byte(r.Key), CA: []byte(r.CA), Revision: rev}
	if r.KeySealed != "" {
		if r.Key != "" {
			return nil, fmt.Errorf("secret: record %s: both a plain and a sealed key", s.ID())
		}
		key, err := keys.Open(r.KeySealed, sealContext(s.Namespace, s.Name))
		if err != nil {
			return nil, fmt.Errorf("secret: record %s: its private key: %w", s.ID(), err)
		}
		s.Key, s.sealedWith = key, seal.EnvelopeKeyID(r.KeySealed)
	}
	switch r.Type {
	case TypeTLS:
	case TypeCA:
		// Not checked against the clock, so an expired one still loads.
		if err := s.checkCA(time.Time{}); err != nil {
			return nil, fmt.Errorf("secret: record %s: %w", s.ID(), err)
		}
		return s, nil
	default:
		return nil, fmt.Errorf("secret: record %s/%s: type %q", r.Namespace, r.Name, r.Type)
	}
	// Checked at the certificate's own start, so an expired one still loads.
	if c, err := certificates("cert", s.Cert); err != nil || len(c) == 0 {
		return nil, fmt.Errorf("secret: record %s: certificate: %v", s.ID(), err)
	} else if err := s.check(c[0].NotBefore); err != nil {
		return nil, fmt.Errorf("secret: record %s: %w", s.ID(), err)
	}
	return s, nil
}
