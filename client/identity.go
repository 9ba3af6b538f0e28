package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Certificate is a workload certificate issued by the server's authority
// (POST /v1/identity/certificates), with the private key it was asked for.
type Certificate struct {
	Identity         string    `json:"identity"` // spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/NAME
	CertificateChain string    `json:"certificateChain"`
	Bundle           string    `json:"bundle"` // the roots to trust, PEM
	NotAfter         time.Time `json:"notAfter"`
	Serial           string    `json:"serial"`
	KeyPEM           string    `json:"-"` // PKCS #8; never sent to the server
}

// TrustBundle is the server authority's roots (GET /v1/identity/bundle).
type TrustBundle struct {
	TrustDomain string `json:"trustDomain"`
	Bundle      string `json:"bundle"`
	Roots       []struct {
		Subject   string    `json:"subject"`
		NotBefore time.Time `json:"notBefore"`
		NotAfter  time.Time `json:"notAfter"`
		SHA256    string    `json:"sha256"`
		Signing   bool      `json:"signing"`
	} `json:"roots"`
}

// Certificate asks the server for a certificate for the service account
// account of namespace, for ttl (0: the server's default). The key is made
// here, an ECDSA P-256 key that never leaves the process; the token needs
// identity:write on namespace.
func (c *Client) Certificate(ctx context.Context, namespace, account string, ttl time.Duration) (Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certificate{}, fmt.Errorf("client: generate key: %w", err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return Certificate{}, fmt.Errorf("client: certificate request: %w", err)
	}
	req := struct {
		Namespace      string `json:"namespace"`
		ServiceAccount string `json:"serviceAccount"`
		CSR            string `json:"csr"`
		TTL            string `json:"ttl,omitempty"`
	}{namespace, account, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})), ""}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var out Certificate
	if err := c.Call(ctx, http.MethodPost, "/v1/identity/certificates", req, &out); err != nil {
		return Certificate{}, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Certificate{}, fmt.Errorf("client: marshal key: %w", err)
	}
	out.KeyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	return out, nil
}

// TrustBundle reads the roots workloads should trust.
func (c *Client) TrustBundle(ctx context.Context) (TrustBundle, error) {
	var out TrustBundle
	err := c.Call(ctx, http.MethodGet, "/v1/identity/bundle", nil, &out)
	return out, err
}

// Identity file names in an IdentityFiles directory, as grpc-go's
// file_watcher certificate provider and most TLS servers read them.
const (
	CertFile   = "cert.pem" // the certificate chain
	KeyFile    = "key.pem"
	BundleFile = "ca.pem" // the trust bundle
)

// WriteIdentity writes cert's chain, key and bundle into dir (created
// 0700), each file replaced atomically (written aside, then renamed) so a
// reader never sees half a file. A reader of two files may still pair a
// new chain with the old key for a moment: readers such as grpc-go's
// file_watcher then keep their previous pair and read again at their next
// refresh.
func WriteIdentity(dir string, cert Certificate) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	for _, f := range []struct {
		name, data string
		mode       os.FileMode
	}{{KeyFile, cert.KeyPEM, 0o600}, {CertFile, cert.CertificateChain, 0o644}, {BundleFile, cert.Bundle, 0o644}} {
		tmp, err := os.CreateTemp(dir, "."+f.name+".*")
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		_, werr := tmp.WriteString(f.data)
		if err := tmp.Chmod(f.mode); werr == nil {
			werr = err
		}
		if err := tmp.Close(); werr == nil {
			werr = err
		}
		if werr == nil {
			werr = os.Rename(tmp.Name(), filepath.Join(dir, f.name))
		}
		if werr != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("client: write %s: %w", f.name, werr)
		}
	}
	return nil
}

// KeepIdentity keeps dir's certificate, key and bundle fresh for the
// service account account of namespace until ctx ends: a new certificate
// at half of the current one's lifetime, and at once when the server's
// bundle changes (a root rotation), checked every check interval (0: one
// minute). Errors are retried with backoff and reported to onErr (nil:
// ignored); each certificate written is reported to onWrite (nil:
// ignored). It returns ctx's error, or the first error if the very first
// certificate cannot be had (a caller learns at once of a wrong token).
func (c *Client) KeepIdentity(ctx context.Context, namespace, account, dir string, ttl, check time.Duration,
	onWrite func(Certificate), onErr func(error)) error {
	if check <= 0 {
		check = time.Minute
	}
	cert, err := c.Certificate(ctx, namespace, account, ttl)
	if err == nil {
		err = WriteIdentity(dir, cert)
	}
	if err != nil {
		return err
	}
	if onWrite != nil {
		onWrite(cert)
	}
	t := time.NewTimer(check)
	defer t.Stop()
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		renew := !time.Now().Before(cert.NotAfter.Add(-lifetime(cert) / 2))
		if !renew {
			b, err := c.TrustBundle(ctx)
			if err == nil && b.Bundle != cert.Bundle {
				renew = true
			} else if err != nil && onErr != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
		next := check
		if renew {
			nc, err := c.Certificate(ctx, namespace, account, ttl)
			if err == nil {
				err = WriteIdentity(dir, nc)
			}
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if onErr != nil {
					onErr(err)
				}
				next, backoff = backoff, min(2*backoff, check)
			} else {
				cert, backoff = nc, time.Second
				if onWrite != nil {
					onWrite(cert)
				}
			}
		}
		if d := time.Until(cert.NotAfter.Add(-lifetime(cert) / 2)); d > 0 && d < next {
			next = d
		}
		t.Reset(next)
	}
}

// lifetime is how long cert was issued for, read from its leaf.
func lifetime(cert Certificate) time.Duration {
	b, _ := pem.Decode([]byte(cert.CertificateChain))
	if b == nil {
		return 0
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return 0
	}
	return leaf.NotAfter.Sub(leaf.NotBefore)
}
