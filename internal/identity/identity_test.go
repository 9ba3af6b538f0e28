package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// start opens an engine over the embedded store in dir with a service
// tracking it, as the server wires them.
func start(t *testing.T, dir string, opts Options) (*Service, func()) {
	t.Helper()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := commit.Open(st, commit.Options{Tables: map[store.Kind]catalog.Table{}, Trackers: []commit.Tracker{s}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background(), eng); err != nil {
		t.Fatal(err)
	}
	return s, func() { eng.Close(); st.Close() }
}

func csr(t *testing.T) []byte {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

var td = ca.Options{TrustDomain: "cluster.local"}
var api = ca.ID{TrustDomain: "cluster.local", Namespace: "orders", Account: "api"}

func TestTheAuthorityIsCreatedOnceAndSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	s, stop := start(t, dir, Options{CA: td})
	if rev := s.eng.Load().Revision(); rev != 0 {
		t.Fatalf("a server that was asked for no identity wrote revision %d at start", rev)
	}
	root := mustAuthority(t, s).Roots()[0]
	before, err := s.Sign(context.Background(), csr(t), api, 0)
	if err != nil {
		t.Fatal(err)
	}
	stop()

	s, stop = start(t, dir, Options{CA: td})
	defer stop()
	if got := mustAuthority(t, s).Roots(); len(got) != 1 || !got[0].Equal(root) {
		t.Fatal("a restarted server made a new root: every certificate it issued stopped verifying")
	}
	after, err := s.Sign(context.Background(), csr(t), api, 0)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(mustAuthority(t, s).Bundle())
	for _, is := range []*ca.Issued{before, after} {
		if _, err := is.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRotationIsStoredAndKeepsTheOldRootTrusted(t *testing.T) {
	dir := t.TempDir()
	s, stop := start(t, dir, Options{CA: td})
	old, err := s.Sign(context.Background(), csr(t), api, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rotate(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(mustAuthority(t, s).Roots()); n != 2 {
		t.Fatalf("%d trusted roots after a rotation, want 2", n)
	}
	stop()
	s, stop = start(t, dir, Options{CA: td})
	defer stop()
	if n := len(mustAuthority(t, s).Roots()); n != 2 {
		t.Fatalf("%d trusted roots after a restart, want the rotation's 2", n)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(mustAuthority(t, s).Bundle())
	if _, err := old.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("a certificate of the old root no longer verifies: %v", err)
	}
}

func TestTheUsersCAIsUsedAndRotatedTo(t *testing.T) {
	certPEM, keyPEM := userRoot(t, "user root 1")
	dir := t.TempDir()
	s, stop := start(t, dir, Options{CA: td, CertPEM: certPEM, KeyPEM: keyPEM})
	if cn := mustAuthority(t, s).Roots()[0].Subject.CommonName; cn != "user root 1" {
		t.Fatalf("signing root %q, want the user's", cn)
	}
	stop()
	// The same files again: nothing changes.
	s, stop = start(t, dir, Options{CA: td, CertPEM: certPEM, KeyPEM: keyPEM})
	if n := len(mustAuthority(t, s).Roots()); n != 1 {
		t.Fatalf("%d roots after a restart with the same files", n)
	}
	stop()
	cert2, key2 := userRoot(t, "user root 2")
	s, stop = start(t, dir, Options{CA: td, CertPEM: cert2, KeyPEM: key2})
	defer stop()
	roots := mustAuthority(t, s).Roots()
	if len(roots) != 2 || roots[0].Subject.CommonName != "user root 2" || roots[1].Subject.CommonName != "user root 1" {
		t.Fatalf("roots after new files: %v", roots)
	}
	// A key that is not the certificate's is refused at start.
	if _, err := New(Options{CA: td, CertPEM: cert2}); err == nil {
		t.Fatal("a certificate without its key was accepted")
	}
	st, _ := embedded.Open(t.TempDir())
	defer st.Close()
	bad, _ := New(Options{CA: td, CertPEM: cert2, KeyPEM: keyPEM})
	eng, err := commit.Open(st, commit.Options{Tables: map[store.Kind]catalog.Table{}, Trackers: []commit.Tracker{bad}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := bad.Start(context.Background(), eng); err == nil {
		t.Fatal("a CA whose key does not match its certificate started")
	}
}

func userRoot(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func mustAuthority(t *testing.T, s *Service) *ca.Authority {
	t.Helper()
	a, err := s.Authority(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRecentListsTheLastIssuedNewestFirst(t *testing.T) {
	s, stop := start(t, t.TempDir(), Options{CA: td})
	defer stop()
	c := csr(t)
	for i := range MaxIssued + 3 {
		id := api
		id.Account = fmt.Sprintf("sa-%d", i)
		if _, err := s.Sign(context.Background(), c, id, 0); err != nil {
			t.Fatal(err)
		}
	}
	got := s.Recent()
	if len(got) != MaxIssued {
		t.Fatalf("%d remembered, want %d", len(got), MaxIssued)
	}
	if got[0].ID.Account != fmt.Sprintf("sa-%d", MaxIssued+2) || got[MaxIssued-1].ID.Account != "sa-3" {
		t.Fatalf("newest %s, oldest %s", got[0].ID.Account, got[MaxIssued-1].ID.Account)
	}
	for i := 1; i < len(got); i++ {
		if got[i].IssuedAt.After(got[i-1].IssuedAt) {
			t.Fatalf("not newest first at %d", i)
		}
	}
}
