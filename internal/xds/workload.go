package xds

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// Workload certificates over SDS, for Envoy nodes (docs/security.md,
// "Envoy over SDS"): Envoy's variant of an ISTIO_MUTUAL cluster or
// listener names the SDS secrets "default" (the workload's certificate
// chain and key) and "ROOTCA" (the mesh's roots), Istio's names. The
// server answers them on the ADS stream: "default" with a certificate for
// the node's identity (spiffe://TD/ns/NAMESPACE/sa/SERVICE_ACCOUNT, from
// its metadata or Istio node id), issued only when the stream's token may
// have it (identity:write on the namespace, what the identity API asks);
// "ROOTCA" with the trust bundle, to any stream. Nodes of one identity
// share one certificate, a hidden cache entry keyed by the identity: the
// cache stays one encoding per version, not one per node.

// WorkloadCert is a workload's certificate as SDS serves it.
type WorkloadCert struct {
	ID       string // its SPIFFE ID
	ChainPEM []byte // the leaf, then intermediates
	KeyPEM   []byte
	NotAfter time.Time
	Issued   time.Time
}

// WorkloadIssuer signs workload certificates from the mesh's authority.
type WorkloadIssuer interface {
	// IssueWorkload makes a key and a certificate for the identity of
	// service account sa of namespace ns.
	IssueWorkload(ctx context.Context, ns, sa string) (WorkloadCert, error)
	// Bundle returns the trust bundle (PEM roots).
	Bundle(ctx context.Context) ([]byte, error)
}

// IdentityAccess is what a SecretAccess may also answer: whether the
// stream may have the workload identities of namespace ns. A SecretAccess
// without it allows no workload certificate.
type IdentityAccess interface {
	AllowsIdentity(ns string) bool
}

// workloadKeySep separates "default" from the identity in its cache key.
const workloadKeySep = "\x00id="

// workloads keeps the certificates served as "default" and the bundle as
// "ROOTCA" fresh in the cache.
type workloads struct {
	issuer WorkloadIssuer
	cache  *Cache
	log    *slog.Logger

	mu     sync.Mutex
	certs  map[string]*workloadState // by SPIFFE key (ns/sa)
	bundle []byte
}

type workloadState struct {
	ns, sa   string
	cert     WorkloadCert
	lastWant time.Time
	stale    bool // the roots changed since it was issued
}

func newWorkloads(issuer WorkloadIssuer, c *Cache, log *slog.Logger) *workloads {
	return &workloads{issuer: issuer, cache: c, log: log, certs: map[string]*workloadState{}}
}

// certKey is the cache key of the "default" secret of ns/sa.
func certKey(ns, sa string) string { return CertificateName + workloadKeySep + ns + "/" + sa }

// ensureCert publishes the certificate of ns/sa unless a fresh one is,
// and returns its cache key.
func (w *workloads) ensureCert(ctx context.Context, ns, sa string) (string, error) {
	key := certKey(ns, sa)
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if st, ok := w.certs[key]; ok {
		st.lastWant = now
		if !st.renewDue(now) {
			return key, nil
		}
	}
	if err := w.issue(ctx, key, ns, sa, now); err != nil {
		return key, err
	}
	return key, w.ensureBundleLocked(ctx)
}

// renewDue: at half of the certificate's lifetime, as istio-agent.
func (st *workloadState) renewDue(now time.Time) bool {
	c := st.cert
	return st.stale || now.After(c.Issued.Add(c.NotAfter.Sub(c.Issued)/2))
}

// issue signs and publishes. Called with w.mu held.
func (w *workloads) issue(ctx context.Context, key, ns, sa string, now time.Time) error {
	c, err := w.issuer.IssueWorkload(ctx, ns, sa)
	if err != nil {
		return fmt.Errorf("xds: workload certificate of %s/%s: %w", ns, sa, err)
	}
	if c.Issued.IsZero() {
		c.Issued = now
	}
	sec := &tlsv3.Secret{Name: CertificateName, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: c.ChainPEM}},
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: c.KeyPEM}},
	}}}
	if _, err := w.cache.Apply(TypeSecret, []Resource{{Name: CertificateName, Key: key, Version: "id", Message: sec, Hidden: true}}, nil, "", now); err != nil {
		return err
	}
	st := w.certs[key]
	if st == nil {
		st = &workloadState{ns: ns, sa: sa}
		w.certs[key] = st
	}
	st.cert, st.lastWant, st.stale = c, now, false
	return nil
}

// ensureBundle publishes the bundle as ROOTCA if it changed.
func (w *workloads) ensureBundle(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ensureBundleLocked(ctx)
}

func (w *workloads) ensureBundleLocked(ctx context.Context) error {
	b, err := w.issuer.Bundle(ctx)
	if err != nil {
		return fmt.Errorf("xds: trust bundle: %w", err)
	}
	if bytes.Equal(b, w.bundle) {
		return nil
	}
	sec := &tlsv3.Secret{Name: RootCertName, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}},
	}}}
	if _, err := w.cache.Apply(TypeSecret, []Resource{{Name: RootCertName, Version: "bundle", Message: sec, Hidden: true}}, nil, "", time.Now()); err != nil {
		return err
	}
	rotated := w.bundle != nil
	w.bundle = b
	if rotated {
		// New roots: every certificate again, with the new chain.
		for _, st := range w.certs {
			st.stale = true
		}
	}
	return nil
}

// workloadCheck is how often run looks for certificates to renew and a
// new bundle (a root rotation), as Sextant's gateway checks its own.
const workloadCheck = time.Minute

// workloadIdle is how long a certificate nobody asked for (no stream
// holds it: each stream asks once) stays published after its last ask.
const workloadIdle = time.Hour

// run renews certificates at half their lifetime, follows the bundle, and
// drops the certificates of identities no stream has named for
// workloadIdle, until ctx ends. wanted reports the keys streams hold.
func (w *workloads) run(ctx context.Context, wanted func() map[string]bool) {
	t := time.NewTicker(workloadCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.ensureBundle(ctx); err != nil {
			w.log.Warn("xds: workload bundle", "err", err)
		}
		held := wanted()
		now := time.Now()
		w.mu.Lock()
		var gone []string
		for key, st := range w.certs {
			if held[key] {
				st.lastWant = now
			} else if now.Sub(st.lastWant) > workloadIdle {
				gone = append(gone, key)
				delete(w.certs, key)
				continue
			}
			if st.renewDue(now) {
				if err := w.issue(ctx, key, st.ns, st.sa, now); err != nil {
					w.log.Warn("xds: renew workload certificate", "identity", st.ns+"/"+st.sa, "err", err)
				}
			}
		}
		w.mu.Unlock()
		if len(gone) > 0 {
			if _, err := w.cache.Apply(TypeSecret, nil, gone, "", now); err != nil {
				w.log.Warn("xds: drop workload certificates", "err", err)
			}
		}
	}
}
