package consulapi

import (
	"context"
	"crypto/sha1"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/store"
)

// CA is the server's certificate authority (*identity.Service): Connect's
// CA roots and leaf certificates are Sextant's own, so a Consul client's
// leaf chains to the bundle every Sextant workload trusts. Called from
// request goroutines.
type CA interface {
	// Authority is the authority signing now, created (written to the
	// store) if there is none yet.
	Authority(ctx context.Context) (*ca.Authority, error)
	// Revision is the stored authority's revision (0: none yet); it
	// changes with each rotation.
	Revision() int64
}

// errConnectOff is Consul's answer when Connect is disabled; its clients
// look for these words.
var errConnectOff = &httpError{http.StatusInternalServerError, "Connect must be enabled in order to use this endpoint"}

func (a *API) connectRoutes() {
	a.handle("GET /v1/agent/connect/ca/roots", a.caRoots)
	a.handle("GET /v1/connect/ca/roots", a.caRoots)
	a.handle("GET /v1/agent/connect/ca/leaf/{name}", a.caLeaf)
	a.handle("GET /v1/catalog/connect/{name}", a.catalogConnect)
	a.handle("GET /v1/health/connect/{name}", a.healthConnect)
}

// caRoot is Consul's CARoot.
type caRoot struct {
	ID                  string
	Name                string
	SerialNumber        uint64
	SigningKeyID        string
	ExternalTrustDomain string
	NotBefore           time.Time
	NotAfter            time.Time
	RootCert            string
	IntermediateCerts   []string
	Active              bool
	PrivateKeyType      string
	PrivateKeyBits      int
	CreateIndex         int64
	ModifyIndex         int64
}

type caRootList struct {
	ActiveRootID string
	TrustDomain  string
	Roots        []caRoot
}

// colonHex is Consul's way of printing fingerprints and key ids.
func colonHex(b []byte) string {
	s := hex.EncodeToString(b)
	var out strings.Builder
	for i := 0; i < len(s); i += 2 {
		if i > 0 {
			out.WriteByte(':')
		}
		out.WriteString(s[i : i+2])
	}
	return out.String()
}

// rootID is a root's ID as Consul computes it: the SHA-1 of its DER.
func rootID(c *x509.Certificate) string {
	sum := sha1.Sum(c.Raw)
	return colonHex(sum[:])
}

func keyBits(c *x509.Certificate) (string, int) {
	switch c.PublicKeyAlgorithm {
	case x509.ECDSA:
		return "ec", 256 // the authority's own roots are P-256; a user's root may differ, and clients do not read it
	case x509.RSA:
		return "rsa", 2048
	}
	return strings.ToLower(c.PublicKeyAlgorithm.String()), 0
}

// caRoots answers the authority's trusted roots, the signing one active.
// With ?index it waits for a rotation (another revision of the authority).
func (a *API) caRoots(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Authenticated(r.Context()); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	if a.opts.CA == nil {
		return errConnectOff
	}
	b, err := parseBlocking(r.URL.Query())
	if err != nil {
		return err
	}
	if b.index > 0 && b.index >= a.opts.CA.Revision() {
		if err := a.waitCA(r, b, func() bool { return a.opts.CA.Revision() != b.index }); err != nil {
			return err
		}
	}
	auth, err := a.opts.CA.Authority(r.Context())
	if err != nil {
		return err
	}
	rev := a.opts.CA.Revision()
	out := caRootList{TrustDomain: auth.TrustDomain(), Roots: []caRoot{}}
	for i, c := range auth.Roots() {
		typ, bits := keyBits(c)
		root := caRoot{ID: rootID(c), Name: "Sextant CA root " + c.Subject.CommonName, SigningKeyID: colonHex(c.SubjectKeyId),
			NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC(), Active: i == 0,
			RootCert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})), IntermediateCerts: []string{},
			PrivateKeyType: typ, PrivateKeyBits: bits, CreateIndex: rev, ModifyIndex: rev}
		if c.SerialNumber.IsUint64() {
			root.SerialNumber = c.SerialNumber.Uint64()
		}
		if i == 0 {
			out.ActiveRootID = root.ID
		}
		out.Roots = append(out.Roots, root)
	}
	a.setMeta(w, rev)
	return writeJSON(w, out)
}

// waitCA holds a blocking read until done reports true after a change of
// the system kind (where the authority is kept), or b's wait passes.
func (a *API) waitCA(r *http.Request, b blocking, done func() bool) error {
	sub, err := a.reg.Catalog().Subscribe(a.reg.Catalog().Revision(), store.System)
	if err != nil {
		return nil // older than the change log: answer what is
	}
	ctx, release, err := a.hold(r, b)
	if err != nil {
		return err
	}
	defer release()
	for !done() {
		if _, err := sub.Next(ctx, 64); err != nil {
			break
		}
	}
	return nil
}

// leafCert is Consul's LeafCert.
type leafCert struct {
	SerialNumber  string
	CertPEM       string
	PrivateKeyPEM string
	Service       string
	ServiceURI    string
	ValidAfter    time.Time
	ValidBefore   time.Time
	CreateIndex   int64
	ModifyIndex   int64
}

// leaf is a service's certificate as the API hands it out until renewAt.
type leaf struct {
	cert    leafCert
	caRev   int64 // the authority's revision that signed it
	renewAt time.Time
}

// leaves keeps each service's leaf, as Consul's agent caches them: every
// caller asking for a service's leaf gets the same certificate and key
// until it is due for renewal or the root rotates.
type leaves struct {
	mu sync.Mutex
	by map[string]*leaf
}

// caLeaf answers a certificate and its key for service {name}, to anyone
// allowed to sign identities of the served namespace (identity:write, as
// Sextant's own /v1/identity/certificates). With ?index it waits until the
// leaf is renewed: at 60% of its life, or when the root rotates.
func (a *API) caLeaf(w http.ResponseWriter, r *http.Request) error {
	if err := a.checkScope(r); err != nil {
		return err
	}
	name, err := serviceName(r)
	if err != nil {
		return err
	}
	if err := acl.Require(r, acl.Permission{Resource: acl.Identity, Access: acl.Write, Namespace: a.opts.Namespace}); err != nil {
		return err
	}
	if a.opts.CA == nil {
		return errConnectOff
	}
	b, err := parseBlocking(r.URL.Query())
	if err != nil {
		return err
	}
	l, err := a.leafOf(r.Context(), name)
	if err != nil {
		return err
	}
	if b.index > 0 && b.index >= l.cert.ModifyIndex {
		// Renewal time ends the wait as a rotation does.
		ctx, cancel := context.WithDeadline(r.Context(), l.renewAt)
		defer cancel()
		if err := a.waitCA(r.WithContext(ctx), b, func() bool { return a.opts.CA.Revision() != l.caRev }); err != nil {
			return err
		}
		if l, err = a.leafOf(r.Context(), name); err != nil {
			return err
		}
	}
	a.setMeta(w, l.cert.ModifyIndex)
	return writeJSON(w, l.cert)
}

// leafOf is the kept leaf of service name, signed anew when there is none,
// it is due for renewal, or another authority revision signs now.
func (a *API) leafOf(ctx context.Context, name string) (*leaf, error) {
	a.leaves.mu.Lock()
	defer a.leaves.mu.Unlock()
	now := time.Now()
	rev := a.opts.CA.Revision()
	if l := a.leaves.by[name]; l != nil && now.Before(l.renewAt) && l.caRev == rev && rev != 0 {
		return l, nil
	}
	auth, err := a.opts.CA.Authority(ctx)
	if err != nil {
		return nil, err
	}
	is, key, err := auth.SignConsulService(a.opts.Namespace, a.opts.Datacenter, name, 0)
	if err != nil {
		if errors.Is(err, ca.ErrInvalid) {
			return nil, badRequest(strings.TrimPrefix(err.Error(), "ca: invalid: "))
		}
		return nil, fmt.Errorf("consulapi: leaf certificate of %q: %w", name, err)
	}
	c := is.Leaf
	index := max(a.reg.Catalog().Revision(), 1)
	if prev := a.leaves.by[name]; prev != nil && index <= prev.cert.ModifyIndex {
		index = prev.cert.ModifyIndex + 1 // nothing was written since: a renewal still moves the index
	}
	l := &leaf{
		cert: leafCert{SerialNumber: colonHex(c.SerialNumber.Bytes()), CertPEM: string(is.ChainPEM), PrivateKeyPEM: string(key),
			Service: name, ServiceURI: c.URIs[0].String(), ValidAfter: c.NotBefore.UTC(), ValidBefore: c.NotAfter.UTC(),
			CreateIndex: index, ModifyIndex: index},
		caRev:   a.opts.CA.Revision(),
		renewAt: c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 6 / 10),
	}
	if a.leaves.by == nil {
		a.leaves.by = map[string]*leaf{}
	}
	a.leaves.by[name] = l
	return l, nil
}
