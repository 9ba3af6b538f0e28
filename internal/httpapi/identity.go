package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/identity"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// Issuer signs workload certificates with the server's authority
// (internal/identity implements it).
type Issuer interface {
	// Authority is the authority signing now, created if there is none.
	Authority(ctx context.Context) (*ca.Authority, error)
	Sign(ctx context.Context, csrPEM []byte, id ca.ID, ttl time.Duration) (*ca.Issued, error)
	Rotate(ctx context.Context, chainPEM, keyPEM []byte) (*ca.Authority, error)
	// Recent are the certificates this server signed lately, newest first.
	Recent() []identity.Issued
}

// issuerBox holds the issuer and when it was set: Recent lists what was
// signed since then (the server's start), which the answer says.
type issuerBox struct {
	i     Issuer
	since time.Time
}

// SetIssuer serves workload identities (/v1/identity/...). Before
// SetRegistry.
func (a *API) SetIssuer(i Issuer) { a.issuer.Store(&issuerBox{i, time.Now()}) }

func (a *API) identityRoutes() {
	a.handle("POST", "/v1/identity/certificates", a.signCertificate)
	a.handle("GET", "/v1/identity/bundle", a.identityBundle)
	a.handle("POST", "/v1/identity/rotate", a.rotateRoot)
	a.handle("GET", "/v1/identity/certificates", a.recentCertificates)
}

type issuedOut struct {
	Identity       string    `json:"identity"`
	Namespace      string    `json:"namespace"`
	ServiceAccount string    `json:"serviceAccount"`
	Serial         string    `json:"serial"`
	IssuedAt       time.Time `json:"issuedAt"`
	NotAfter       time.Time `json:"notAfter"`
}

// recentCertificates lists the certificates this server signed lately, of
// the namespaces the caller may read identities of (?namespace= one).
func (a *API) recentCertificates(w http.ResponseWriter, r *http.Request, reg *backend) error {
	ns := r.URL.Query().Get("namespace")
	f, err := readableFilter(r, acl.Identity, ns)
	if err != nil {
		return err
	}
	iss, err := a.issuerOf()
	if err != nil {
		return err
	}
	out := struct {
		Certificates []issuedOut `json:"certificates"`
		Since        time.Time   `json:"since"`
	}{Certificates: []issuedOut{}}
	if b := a.issuer.Load(); b != nil {
		out.Since = b.since.UTC()
	}
	for _, c := range iss.Recent() {
		if (ns != "" && c.ID.Namespace != ns) || (f != nil && !f.Allows(c.ID.Namespace)) {
			continue
		}
		out.Certificates = append(out.Certificates, issuedOut{Identity: c.ID.String(), Namespace: c.ID.Namespace,
			ServiceAccount: c.ID.Account, Serial: c.Serial, IssuedAt: c.IssuedAt.UTC(), NotAfter: c.NotAfter.UTC()})
	}
	return writeValue(w, reg.Revision(), out)
}

func (a *API) issuerOf() (Issuer, error) {
	b := a.issuer.Load()
	if b == nil {
		return nil, &apiError{http.StatusNotFound, "not_found", "this server issues no workload identities", ""}
	}
	return b.i, nil
}

// signRequest asks for a certificate for spiffe://TD/ns/NAMESPACE/sa/SERVICE_ACCOUNT.
type signRequest struct {
	Namespace      string `json:"namespace"`
	ServiceAccount string `json:"serviceAccount"`
	CSR            string `json:"csr"`
	TTL            string `json:"ttl"` // a Go duration; empty: the server's default
}

type signAnswer struct {
	Identity         string    `json:"identity"`
	CertificateChain string    `json:"certificateChain"`
	Bundle           string    `json:"bundle"`
	NotAfter         time.Time `json:"notAfter"`
	Serial           string    `json:"serial"`
}

func (a *API) signCertificate(w http.ResponseWriter, r *http.Request, reg *backend) error {
	var req signRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if !naming.ValidName(req.Namespace) {
		return badRequest("namespace", "namespace %q is not a valid name ([a-z0-9-._], starting and ending with a letter or digit)", req.Namespace)
	}
	if !naming.ValidName(req.ServiceAccount) {
		return badRequest("serviceAccount", "serviceAccount %q is not a valid name ([a-z0-9-._], starting and ending with a letter or digit)", req.ServiceAccount)
	}
	// The namespace is the grant: a token holding identity:write on
	// "orders" may be any service account of orders, and nothing else.
	if err := acl.Require(r, acl.Permission{Resource: acl.Identity, Access: acl.Write, Namespace: req.Namespace}); err != nil {
		return err
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil {
			return badRequest("ttl", "ttl %q is not a duration such as 24h or 90m", req.TTL)
		}
		ttl = d
	}
	if req.CSR == "" {
		return badRequest("csr", "csr is required: a PEM CERTIFICATE REQUEST signed by an ECDSA P-256 key")
	}
	iss, err := a.issuerOf()
	if err != nil {
		return err
	}
	auth, err := iss.Authority(r.Context())
	if err != nil {
		return err
	}
	id := ca.ID{TrustDomain: auth.TrustDomain(), Namespace: req.Namespace, Account: req.ServiceAccount}
	is, err := iss.Sign(r.Context(), []byte(req.CSR), id, ttl)
	if err != nil {
		return caError(err)
	}
	return writeValue(w, reg.Revision(), signAnswer{Identity: id.String(), CertificateChain: string(is.ChainPEM), Bundle: string(auth.Bundle()),
		NotAfter: is.Leaf.NotAfter.UTC(), Serial: is.Leaf.SerialNumber.Text(16)})
}

// caError answers what the authority refused as a 400 naming the field.
func caError(err error) error {
	if !errors.Is(err, ca.ErrInvalid) {
		return err
	}
	msg := strings.TrimPrefix(err.Error(), "ca: invalid: ")
	field := "csr"
	switch {
	case strings.Contains(msg, "lifetime"):
		field = "ttl"
	case strings.Contains(msg, "namespace"), strings.Contains(msg, "trust domain"):
		field = "namespace"
	case strings.Contains(msg, "service account"):
		field = "serviceAccount"
	}
	return badRequest(field, "%s", msg)
}

type rootInfo struct {
	Subject   string    `json:"subject"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	SHA256    string    `json:"sha256"`
	Signing   bool      `json:"signing"`
}

type bundleAnswer struct {
	TrustDomain string     `json:"trustDomain"`
	Bundle      string     `json:"bundle"`
	Roots       []rootInfo `json:"roots"`
}

func bundleOf(auth *ca.Authority) bundleAnswer {
	out := bundleAnswer{TrustDomain: auth.TrustDomain(), Bundle: string(auth.Bundle())}
	for i, c := range auth.Roots() {
		sum := sha256.Sum256(c.Raw)
		out.Roots = append(out.Roots, rootInfo{Subject: c.Subject.String(), NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC(),
			SHA256: hex.EncodeToString(sum[:]), Signing: i == 0})
	}
	return out
}

// identityBundle answers the trust bundle: public, but only to callers
// with a token when ACLs are on, as every other route.
func (a *API) identityBundle(w http.ResponseWriter, r *http.Request, reg *backend) error {
	if err := acl.Authenticated(r.Context()); err != nil {
		return err
	}
	iss, err := a.issuerOf()
	if err != nil {
		return err
	}
	auth, err := iss.Authority(r.Context())
	if err != nil {
		return err
	}
	return writeValue(w, reg.Revision(), bundleOf(auth))
}

type rotateRequest struct {
	Certificate string `json:"certificate"` // PEM chain up to the root; empty: generate a root
	Key         string `json:"key"`
}

func (a *API) rotateRoot(w http.ResponseWriter, r *http.Request, reg *backend) error {
	if err := acl.Require(r, acl.Admin); err != nil {
		return err
	}
	var req rotateRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			return err
		}
	}
	if (req.Certificate == "") != (req.Key == "") {
		return badRequest("key", "a certificate needs its key, and a key its certificate")
	}
	iss, err := a.issuerOf()
	if err != nil {
		return err
	}
	var chain, key []byte
	if req.Certificate != "" {
		chain, key = []byte(req.Certificate), []byte(req.Key)
	}
	auth, err := iss.Rotate(r.Context(), chain, key)
	if err != nil {
		if errors.Is(err, ca.ErrInvalid) {
			return badRequest("certificate", "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), "identity: "), "ca: invalid: "))
		}
		return err
	}
	return writeValue(w, reg.Revision(), bundleOf(auth))
}
