// Package identity owns the mesh's workload identities on a server: its
// certificate authority as a durable record of the store (created at the
// first start, or from the user's own CA files; rotated through the write
// engine; followed by every server of a cluster, so that each signs with
// the same root), and the signing of certificates for SPIFFE IDs. Which
// caller may have which identity is decided by the API (ACLs on
// namespaces); the certificates themselves are internal/ca's.
package identity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Key is the System record holding the authority's state (ca.State as
// JSON, the signing key included: sealed when the server was given a key,
// Options.Keys; else the store is as secret as the CA).
const Key = "ca"

// Options configure the service.
type Options struct {
	CA ca.Options
	// CertPEM and KeyPEM are the user's own CA (a root, or an
	// intermediate followed by its issuers up to the root). Given at the
	// first start, the authority signs with it; given later and different
	// from the stored signer, the authority rotates to it.
	CertPEM, KeyPEM []byte
	// Keys open the stored signing key and seal it as it is written (nil:
	// stored plain; docs/security.md, "Encryption at rest").
	Keys   *seal.Keyring
	Logger *slog.Logger
}

// Service is the authority a server signs with. It implements
// commit.Tracker: register it with the write engine, then Start it.
type Service struct {
	opts Options
	log  *slog.Logger
	eng  atomic.Pointer[commit.Engine]
	mu   sync.Mutex // serialises reloads
	cur  atomic.Pointer[loaded]
	// create serialises this server's creation of the first authority.
	create sync.Mutex

	issuedMu sync.Mutex
	issued   []Issued // the last MaxIssued, oldest first
	next     int      // where the next goes once issued is full
}

// loaded is the authority as restored from the record of revision rev.
type loaded struct {
	auth       *ca.Authority
	rev        int64
	sealedWith string // the id of the key the record's key is sealed with; "": plain
}

// New returns a service that holds no authority until Start.
func New(opts Options) (*Service, error) {
	if err := ca.ValidTrustDomain(opts.CA.TrustDomain); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if (opts.CertPEM == nil) != (opts.KeyPEM == nil) {
		return nil, errors.New("identity: a CA certificate needs its key, and a key its certificate")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{opts: opts, log: opts.Logger}, nil
}

var _ commit.Tracker = (*Service)(nil)

// Loaded implements commit.Tracker: the catalog was (re)loaded.
func (s *Service) Loaded() {
	if s.eng.Load() != nil {
		s.reloadLogged()
	}
}

// Revision is the revision of the stored authority this server signs
// with (0: none yet): it changes with each rotation, so Consul's clients
// block on it for new roots (internal/consulapi).
func (s *Service) Revision() int64 {
	if l := s.cur.Load(); l != nil {
		return l.rev
	}
	return 0
}

// Applied implements commit.Tracker: a rotation written by this or
// another server replaces the authority.
func (s *Service) Applied(changes []store.Change) {
	if s.eng.Load() == nil {
		return
	}
	for _, ch := range changes {
		for _, op := range ch.Ops {
			if op.Kind == store.System && op.Key == Key {
				s.reloadLogged()
				return
			}
		}
	}
}

// record is the stored state and its revision, as the catalog holds it.
func (s *Service) record() (*catalog.Blob, int64) {
	t, _ := s.eng.Load().Catalog().Table(store.System).(*catalog.Records)
	if t == nil {
		return nil, 0
	}
	v, rev, ok := t.Record(Key)
	if !ok {
		return nil, 0
	}
	return v.(*catalog.Blob), rev
}

// reloadLogged reloads, keeping the authority it has if the record
// cannot be read: the bad record is reported, and the next good one
// replaces it.
func (s *Service) reloadLogged() {
	if err := s.reload(); err != nil {
		s.log.Error("the stored certificate authority cannot be read; still signing with the previous one", "err", err)
	}
}

// reload restores the stored authority if it changed.
func (s *Service) reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, rev := s.record()
	if b == nil || (s.cur.Load() != nil && s.cur.Load().rev == rev) {
		return nil
	}
	st, sealedWith, err := decode(b.Value, s.opts.Keys)
	if err != nil {
		return fmt.Errorf("identity: the stored certificate authority (record %v/%s, revision %d): %w", store.System, Key, rev, err)
	}
	a, err := ca.Restore(s.opts.CA, st)
	if err != nil {
		return fmt.Errorf("identity: stored authority (revision %d): %w", rev, err)
	}
	s.cur.Store(&loaded{auth: a, rev: rev, sealedWith: sealedWith})
	s.log.Info("certificate authority loaded", "revision", rev, "root", a.Roots()[0].Subject.CommonName, "trusted_roots", len(a.Roots()))
	return nil
}

// Start follows the stored authority. A server creates none until it is
// first needed (Authority), so that a mesh that never asks for an
// identity never writes one; given the user's CA files, it stores them at
// once (or rotates to them when they name another signer than the stored
// one).
func (s *Service) Start(ctx context.Context, eng *commit.Engine) error {
	s.eng.Store(eng)
	// A stored authority this server cannot read (its key sealed with a
	// key it was not given) stops the start: serving without it would
	// sign nothing, or make a second root.
	if err := s.reload(); err != nil {
		return err
	}
	if s.opts.CertPEM == nil {
		return nil
	}
	if s.cur.Load() == nil {
		_, err := s.Authority(ctx)
		return err
	}
	if !s.signsWith(s.opts.CertPEM) {
		s.log.Info("rotating to the certificate authority given on the command line")
		if _, err := s.Rotate(ctx, s.opts.CertPEM, s.opts.KeyPEM); err != nil {
			return err
		}
	}
	return nil
}

// Authority is the authority signing now, created and stored if there is
// none yet: the user's CA files, or a new generated root. In a cluster one
// server's creation wins and the others load it.
func (s *Service) Authority(ctx context.Context) (*ca.Authority, error) {
	if l := s.cur.Load(); l != nil {
		return l.auth, nil
	}
	if s.eng.Load() == nil {
		return nil, ErrNotStarted
	}
	s.create.Lock() // one creation per server at a time
	defer s.create.Unlock()
	if l := s.cur.Load(); l != nil {
		return l.auth, nil
	}
	var a *ca.Authority
	var err error
	if s.opts.CertPEM != nil {
		a, err = ca.FromPEM(s.opts.CA, s.opts.CertPEM, s.opts.KeyPEM)
	} else {
		a, err = ca.Generate(s.opts.CA)
	}
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if err := s.write(ctx, a, 0); err != nil && !errors.Is(err, errCreated) {
		return nil, err
	}
	if err := s.reload(); err != nil { // ours, or the server's that created it first
		return nil, err
	}
	if l := s.cur.Load(); l != nil {
		s.log.Info("certificate authority created", "root", l.auth.Roots()[0].Subject.CommonName, "trust_domain", s.opts.CA.TrustDomain)
		return l.auth, nil
	}
	return nil, errors.New("identity: the certificate authority was written but cannot be read back")
}

// signsWith reports whether certPEM's first certificate is the signer's.
func (s *Service) signsWith(certPEM []byte) bool {
	st, err := s.cur.Load().auth.State()
	if err != nil {
		return false
	}
	first := func(b []byte) []byte {
		i := bytes.Index(b, []byte("-----END CERTIFICATE-----"))
		if i < 0 {
			return nil
		}
		return bytes.TrimSpace(b[:i])
	}
	return bytes.Equal(first([]byte(st.Chain)), first(certPEM))
}

// caWrite stores an authority's state on condition of the revision it was
// derived from (0: none stored), so two servers' rotations never both win.
type caWrite struct {
	value []byte
	ifRev int64
}

// errCreated: another server created the authority first.
var errCreated = errors.New("identity: the certificate authority exists")

func (w *caWrite) Plan(tx *commit.Tx) error {
	if v, rev := tx.Get(store.System, Key); v != nil && rev != w.ifRev {
		if w.ifRev == 0 {
			return errCreated
		}
		return fmt.Errorf("identity: the certificate authority changed (revision %d, not %d) while this rotation was decided: %w", rev, w.ifRev, store.ErrConflict)
	}
	tx.PutIf(store.System, Key, w.value, &catalog.Blob{Key: Key, Value: w.value}, w.ifRev)
	return nil
}

func (s *Service) write(ctx context.Context, a *ca.Authority, ifRev int64) error {
	st, err := a.State()
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	value, _, err := encode(st, s.opts.Keys)
	if err != nil {
		return err
	}
	// Checked: in a cluster, a write that lost to another server's is
	// planned again on the catalog that holds the winner's.
	if _, err := s.eng.Load().SubmitChecked(ctx, &caWrite{value: value, ifRev: ifRev}); err != nil {
		return fmt.Errorf("identity: store the certificate authority: %w", err)
	}
	return nil
}

// ErrNotStarted is returned before Start.
var ErrNotStarted = errors.New("identity: the certificate authority is not loaded yet")

// Sign issues a certificate for id from a PEM CSR (see ca.Authority.Sign).
func (s *Service) Sign(ctx context.Context, csrPEM []byte, id ca.ID, ttl time.Duration) (*ca.Issued, error) {
	a, err := s.Authority(ctx)
	if err != nil {
		return nil, err
	}
	is, err := a.Sign(csrPEM, id, ttl)
	if err == nil {
		s.remember(Issued{ID: id, Serial: is.Leaf.SerialNumber.Text(16), IssuedAt: time.Now(), NotAfter: is.Leaf.NotAfter})
	}
	return is, err
}

// MaxIssued is how many issued certificates a server remembers.
const MaxIssued = 1000

// Issued is a certificate this server signed, as operators see it: who
// holds it and until when. The certificate itself is not kept.
type Issued struct {
	ID       ca.ID
	Serial   string
	IssuedAt time.Time
	NotAfter time.Time
}

func (s *Service) remember(is Issued) {
	s.issuedMu.Lock()
	defer s.issuedMu.Unlock()
	if len(s.issued) < MaxIssued {
		s.issued = append(s.issued, is)
		return
	}
	s.issued[s.next] = is
	s.next = (s.next + 1) % MaxIssued
}

// Recent returns the certificates this server signed lately (at most
// MaxIssued, since it started), newest first. Other servers of a cluster
// keep their own.
func (s *Service) Recent() []Issued {
	s.issuedMu.Lock()
	defer s.issuedMu.Unlock()
	out := make([]Issued, 0, len(s.issued))
	for i := range s.issued {
		j := (s.next - 1 - i + 2*len(s.issued)) % len(s.issued)
		out = append(out, s.issued[j])
	}
	return out
}

// Rotate makes chainPEM/keyPEM (or, when nil, a new generated root) the
// signer, keeping the old root trusted (ca.Authority.Rotate) and pruning
// roots no certificate can still chain to. It returns the new authority,
// stored and applied. A concurrent rotation on another server fails it
// with a conflict (store.ErrConflict): the caller may look and try again.
func (s *Service) Rotate(ctx context.Context, chainPEM, keyPEM []byte) (*ca.Authority, error) {
	if _, err := s.Authority(ctx); err != nil {
		return nil, err
	}
	l := s.cur.Load()
	// Rotate a copy: the live authority changes only when the record does.
	st, err := l.auth.State()
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	next, err := ca.Restore(s.opts.CA, st)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if err := next.Rotate(chainPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	next.Prune()
	if err := s.write(ctx, next, l.rev); err != nil {
		return nil, err
	}
	if err := s.reload(); err != nil {
		return nil, err
	}
	return s.cur.Load().auth, nil
}

// SignNewKey makes a key and issues a certificate for id to it (see
// ca.Authority.SignNewKey): for the xDS server's SDS secret "default".
func (s *Service) SignNewKey(ctx context.Context, id ca.ID, ttl time.Duration) (*ca.Issued, []byte, error) {
	a, err := s.Authority(ctx)
	if err != nil {
		return nil, nil, err
	}
	is, key, err := a.SignNewKey(id, ttl)
	if err == nil {
		s.remember(Issued{ID: id, Serial: is.Leaf.SerialNumber.Text(16), IssuedAt: time.Now(), NotAfter: is.Leaf.NotAfter})
	}
	return is, key, err
}
