// Package ca owns the mesh's certificate authority: its signing root
// (generated at first start, or the user's own root or intermediate), the
// roots it trusts while a rotation is under way, the trust bundle, and the
// signing of short-lived workload certificates from CSRs for SPIFFE
// identities. It keeps nothing on disk: State is what the server stores
// durably (and replicates in a cluster) and Restore reads back. Who may
// ask for which identity is the caller's decision, not this package's.
package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"sync"
	"time"
)

// ErrInvalid marks a request the authority refuses for what it asks:
// a malformed CSR, a wrong key, an identity outside the trust domain, a
// lifetime out of bounds. Callers answer it as a client error.
var ErrInvalid = errors.New("invalid")

// Defaults for Options.
const (
	DefaultTTL    = 24 * time.Hour
	DefaultMaxTTL = 7 * 24 * time.Hour
	rootLifetime  = 10 * 365 * 24 * time.Hour
)

// Options configure an Authority.
type Options struct {
	TrustDomain string
	TTL         time.Duration    // a certificate's lifetime when the request names none; DefaultTTL if 0
	MaxTTL      time.Duration    // the longest lifetime a request may ask for; DefaultMaxTTL if 0
	Now         func() time.Time // time.Now if nil
}

func (o *Options) defaults() error {
	if err := ValidTrustDomain(o.TrustDomain); err != nil {
		return err
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = DefaultMaxTTL
	}
	if o.TTL < time.Minute || o.TTL > o.MaxTTL {
		return fmt.Errorf("ca: certificate lifetime %v must be between 1m and the maximum %v", o.TTL, o.MaxTTL)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Authority signs workload certificates. It is safe for concurrent use.
type Authority struct {
	opts Options

	mu      sync.RWMutex
	signer  *signer
	retired []retired // roots still trusted after a rotation, newest first
	bundle  []byte    // PEM of every trusted root, the signer's first
}

// signer is the certificate that signs workloads and its issuers up to a
// self-signed root.
type signer struct {
	chain []*x509.Certificate // signer first, root last
	inter []byte              // PEM of the intermediates between the signer and its root
	key   crypto.Signer
	// cross is the signer cross-signed by the previous root during a
	// rotation: appended to every leaf, it lets a peer that trusts only
	// the previous root verify the new certificates too.
	cross    *x509.Certificate
	chainPEM []byte // inter, then cross: appended to every leaf
}

func (s *signer) withCross(cross *x509.Certificate) *signer {
	n := *s
	n.cross = cross
	n.chainPEM = append([]byte(nil), s.inter...)
	if cross != nil {
		n.chainPEM = append(n.chainPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cross.Raw})...)
	}
	return &n
}

func (s *signer) root() *x509.Certificate { return s.chain[len(s.chain)-1] }

// retired is a root that signs no more but is trusted until every
// certificate it signed has expired.
type retired struct {
	root      *x509.Certificate
	retiredAt time.Time
}

// Generate starts an authority with a new self-signed ECDSA P-256 root.
func Generate(opts Options) (*Authority, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	s, err := newRoot(opts.TrustDomain, opts.Now())
	if err != nil {
		return nil, err
	}
	a := &Authority{opts: opts, signer: s}
	a.rebundle()
	return a, nil
}

// FromPEM starts an authority signing with the user's own CA: chainPEM is
// the signing certificate followed by its issuers up to a self-signed
// root (a root alone is a chain of one), keyPEM the signing key.
func FromPEM(opts Options, chainPEM, keyPEM []byte) (*Authority, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	s, err := parseSigner(chainPEM, keyPEM, opts.Now())
	if err != nil {
		return nil, err
	}
	a := &Authority{opts: opts, signer: s}
	a.rebundle()
	return a, nil
}

func newRoot(td string, now time.Time) (*signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: generate root key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"Sextant"}, CommonName: fmt.Sprintf("Sextant root %s %x", td, serial.Bytes()[:4])},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(rootLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		URIs:                  []*url.URL{trustDomainURL(td)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca: sign root: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: parse new root: %w", err)
	}
	return (&signer{chain: []*x509.Certificate{cert}, key: key}).withCross(nil), nil
}

// parseSigner reads a signing chain and key, naming what is wrong with
// them: the key must match the first certificate, which must be a CA
// allowed to sign certificates, each certificate must be signed by the
// next, and the last must be a self-signed root.
func parseSigner(chainPEM, keyPEM []byte, now time.Time) (*signer, error) {
	var chain []*x509.Certificate
	var chainOut bytes.Buffer
	rest := chainPEM
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("ca: %w: certificate file holds a %q block; want CERTIFICATE", ErrInvalid, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ca: %w: certificate %d: %w", ErrInvalid, len(chain)+1, err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("ca: %w: no PEM CERTIFICATE block in the certificate file", ErrInvalid)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(chain[0].PublicKey) {
		return nil, fmt.Errorf("ca: %w: the key does not match the certificate %q", ErrInvalid, chain[0].Subject)
	}
	for i, c := range chain {
		if !c.IsCA || !c.BasicConstraintsValid {
			return nil, fmt.Errorf("ca: %w: certificate %q is not a CA (basic constraints)", ErrInvalid, c.Subject)
		}
		if c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0 {
			return nil, fmt.Errorf("ca: %w: certificate %q may not sign certificates (key usage)", ErrInvalid, c.Subject)
		}
		if now.After(c.NotAfter) || now.Before(c.NotBefore) {
			return nil, fmt.Errorf("ca: %w: certificate %q is valid from %v to %v, not now", ErrInvalid, c.Subject, c.NotBefore, c.NotAfter)
		}
		issuer := c
		if i+1 < len(chain) {
			issuer = chain[i+1]
		}
		if err := c.CheckSignatureFrom(issuer); err != nil {
			if i+1 == len(chain) {
				return nil, fmt.Errorf("ca: %w: the chain must end with its self-signed root; %q is not self-signed: %w", ErrInvalid, c.Subject, err)
			}
			return nil, fmt.Errorf("ca: %w: certificate %q is not signed by the next one, %q: %w", ErrInvalid, c.Subject, issuer.Subject, err)
		}
		if i+1 < len(chain) {
			_ = pem.Encode(&chainOut, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
		}
	}
	return (&signer{chain: chain, inter: chainOut.Bytes(), key: key}).withCross(nil), nil
}

// ParseKey reads a PEM private key (PKCS #8, SEC 1 EC or PKCS #1 RSA).
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, fmt.Errorf("ca: %w: no PEM block in the key file", ErrInvalid)
	}
	var k any
	var err error
	switch b.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	default:
		return nil, fmt.Errorf("ca: %w: key file holds a %q block; want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY", ErrInvalid, b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("ca: %w: key: %w", ErrInvalid, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("ca: %w: key of type %T cannot sign", ErrInvalid, k)
	}
	return s, nil
}

func newSerial() (*big.Int, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("ca: serial: %w", err)
	}
	b[0] &= 0x7f // positive, as RFC 5280 wants
	return new(big.Int).SetBytes(b[:]), nil
}

// TrustDomain is the domain of every identity this authority signs.
func (a *Authority) TrustDomain() string { return a.opts.TrustDomain }

// Bundle is the PEM of every root a workload should trust: the signer's
// root first, then roots retired by a rotation whose certificates may
// still be in use.
func (a *Authority) Bundle() []byte {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.bundle
}

// Roots are the trusted roots, the signer's first.
func (a *Authority) Roots() []*x509.Certificate {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := []*x509.Certificate{a.signer.root()}
	for _, r := range a.retired {
		out = append(out, r.root)
	}
	return out
}

func (a *Authority) rebundle() {
	var b bytes.Buffer
	_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: a.signer.root().Raw})
	for _, r := range a.retired {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.root.Raw})
	}
	a.bundle = b.Bytes()
}

// Rotate makes a new signer: the given chain and key (as FromPEM reads
// them), or a newly generated root when chainPEM is nil. The old root stays
// in the bundle until Prune finds every certificate it signed expired, and
// when the old signer is a root, the new signer is cross-signed by it and
// the cross certificate sent with every new certificate: a peer holding
// the old bundle verifies new certificates, a peer holding the new bundle
// old ones, so no handshake fails while workloads pick up the new bundle.
func (a *Authority) Rotate(chainPEM, keyPEM []byte) error {
	now := a.opts.Now()
	var s *signer
	var err error
	if chainPEM == nil {
		s, err = newRoot(a.opts.TrustDomain, now)
	} else {
		s, err = parseSigner(chainPEM, keyPEM, now)
	}
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.signer
	if old.root().Equal(s.root()) {
		a.signer = s
		a.rebundle()
		return nil
	}
	if len(old.chain) == 1 {
		cross, err := crossSign(s.chain[0], old, now)
		if err != nil {
			return err
		}
		s = s.withCross(cross)
	}
	a.retired = append([]retired{{root: old.root(), retiredAt: now}}, a.retired...)
	a.signer = s
	a.rebundle()
	return nil
}

// Prune forgets retired roots that no unexpired certificate can chain to
// (retired longer ago than the longest lifetime the authority signs). It
// reports whether the bundle changed.
func (a *Authority) Prune() bool {
	cut := a.opts.Now().Add(-a.opts.MaxTTL)
	a.mu.Lock()
	defer a.mu.Unlock()
	keep := a.retired[:0]
	for _, r := range a.retired {
		if r.retiredAt.After(cut) {
			keep = append(keep, r)
		}
	}
	if len(keep) == len(a.retired) {
		return false
	}
	clear(a.retired[len(keep):])
	a.retired = keep
	if len(keep) == 0 {
		a.signer = a.signer.withCross(nil) // no peer trusts only the old root any more
	}
	a.rebundle()
	return true
}

// crossSign certifies c's subject and key under the old root.
func crossSign(c *x509.Certificate, old *signer, now time.Time) (*x509.Certificate, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := c.NotAfter
	if old.chain[0].NotAfter.Before(notAfter) {
		notAfter = old.chain[0].NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: c.Subject, SubjectKeyId: c.SubjectKeyId, URIs: c.URIs,
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, old.chain[0], c.PublicKey, old.key)
	if err != nil {
		return nil, fmt.Errorf("ca: cross-sign the new root: %w", err)
	}
	return x509.ParseCertificate(der)
}

// Issued is a signed workload certificate.
type Issued struct {
	ID       ID
	ChainPEM []byte // the leaf, then the signer's intermediates (never the root)
	Leaf     *x509.Certificate
}

// Sign issues a certificate for id to the key of the PEM CSR csrPEM, for
// ttl (the default lifetime if 0). The CSR must be signed by its ECDSA
// P-256 key; if it names URI SANs, they must be exactly id. Its other
// names and extensions are ignored: the certificate carries id alone.
func (a *Authority) Sign(csrPEM []byte, id ID, ttl time.Duration) (*Issued, error) {
	if id.TrustDomain != a.opts.TrustDomain {
		return nil, fmt.Errorf("ca: %w: identity %s is outside the trust domain %q", ErrInvalid, id, a.opts.TrustDomain)
	}
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if ttl == 0 {
		ttl = a.opts.TTL
	}
	if ttl < time.Minute || ttl > a.opts.MaxTTL {
		return nil, fmt.Errorf("ca: %w: lifetime %v must be between 1m and %v", ErrInvalid, ttl, a.opts.MaxTTL)
	}
	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	if len(csr.URIs) > 0 && (len(csr.URIs) != 1 || csr.URIs[0].String() != id.String()) {
		return nil, fmt.Errorf("ca: %w: the CSR names %v; it may name only %s", ErrInvalid, csr.URIs, id)
	}
	is, err := a.issue(csr.PublicKey, id.URL(), id.TrustDomain, ttl)
	if err != nil {
		return nil, fmt.Errorf("ca: sign %s: %w", id, err)
	}
	is.ID = id
	return is, nil
}

// issue signs a certificate for pub naming uri alone, for ttl (checked by
// the caller), cut at the signer's own expiry.
func (a *Authority) issue(pub any, uri *url.URL, td string, ttl time.Duration) (*Issued, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := a.opts.Now()
	a.mu.RLock()
	s := a.signer
	a.mu.RUnlock()
	notAfter := now.Add(ttl)
	if na := s.chain[0].NotAfter; notAfter.After(na) {
		notAfter = na
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{td}},
		NotBefore:             now.Add(-time.Minute), // clock skew between servers and workloads
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyAgreement,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{uri},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.chain[0], pub, s.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse the issued certificate: %w", err)
	}
	out := bytes.NewBuffer(make([]byte, 0, 2*len(der)+len(s.chainPEM)+64))
	_ = pem.Encode(out, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	out.Write(s.chainPEM)
	return &Issued{ChainPEM: out.Bytes(), Leaf: leaf}, nil
}

// ParseCSR reads a PEM certificate request and checks its signature and
// key, naming what is wrong.
func ParseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil {
		return nil, fmt.Errorf("ca: %w: no PEM block in the CSR", ErrInvalid)
	}
	if b.Type != "CERTIFICATE REQUEST" && b.Type != "NEW CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("ca: %w: the CSR is a %q block; want CERTIFICATE REQUEST", ErrInvalid, b.Type)
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ca: %w: CSR: %w", ErrInvalid, err)
	}
	if k, ok := csr.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		return nil, fmt.Errorf("ca: %w: the CSR's key is %s; want ECDSA P-256", ErrInvalid, keyName(csr.PublicKey))
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("ca: %w: the CSR's signature does not verify: %w", ErrInvalid, err)
	}
	return csr, nil
}

func keyName(k any) string {
	if e, ok := k.(*ecdsa.PublicKey); ok {
		return "ECDSA " + e.Curve.Params().Name
	}
	return fmt.Sprintf("%T", k)
}
