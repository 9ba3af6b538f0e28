package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/identity"
	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// defaultTrustDomain is Istio's default, so SPIFFE IDs read the same.
const defaultTrustDomain = "cluster.local"

// identityFlags configure the server's certificate authority
// (docs/security.md, "Workload identity").
type identityFlags struct {
	trustDomain string
	caCert      string
	caKey       string
	certTTL     time.Duration
	certMaxTTL  time.Duration
}

func (f *identityFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.trustDomain, "trust-domain", defaultTrustDomain, "trust domain of workload identities (spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/NAME); it cannot change once the authority is created")
	fl.StringVar(&f.caCert, "ca-cert", "", "PEM certificate of your own CA to sign workload certificates with (a root, or an intermediate followed by its issuers up to the root); empty: the server generates a root at its first start")
	fl.StringVar(&f.caKey, "ca-key", "", "PEM private key of --ca-cert")
	fl.DurationVar(&f.certTTL, "cert-ttl", ca.DefaultTTL, "lifetime of a workload certificate when the request names none")
	fl.DurationVar(&f.certMaxTTL, "cert-max-ttl", ca.DefaultMaxTTL, "the longest lifetime a workload certificate may be asked for; a rotated root stays trusted this long")
}

// newIdentity reads the CA files and returns the service to register with
// the write engine as a tracker and start after it.
func newIdentity(f identityFlags, keys *seal.Keyring, log *slog.Logger) (*identity.Service, error) {
	// Zero values (flags built in code, as tests do) are the defaults.
	if f.trustDomain == "" {
		f.trustDomain = defaultTrustDomain
	}
	if f.certTTL == 0 {
		f.certTTL = ca.DefaultTTL
	}
	if f.certMaxTTL == 0 {
		f.certMaxTTL = ca.DefaultMaxTTL
	}
	opts := identity.Options{
		CA:     ca.Options{TrustDomain: f.trustDomain, TTL: f.certTTL, MaxTTL: f.certMaxTTL},
		Keys:   keys,
		Logger: log.With("component", "identity"),
	}
	if (f.caCert == "") != (f.caKey == "") {
		return nil, fmt.Errorf("--ca-cert and --ca-key go together")
	}
	if f.caCert != "" {
		var err error
		if opts.CertPEM, err = os.ReadFile(f.caCert); err != nil {
			return nil, fmt.Errorf("--ca-cert: %w", err)
		}
		if opts.KeyPEM, err = os.ReadFile(f.caKey); err != nil {
			return nil, fmt.Errorf("--ca-key: %w", err)
		}
	}
	if f.certTTL < time.Minute || f.certTTL > f.certMaxTTL {
		return nil, fmt.Errorf("--cert-ttl %v: must be between 1m and --cert-max-ttl (%v)", f.certTTL, f.certMaxTTL)
	}
	s, err := identity.New(opts)
	if err != nil {
		return nil, fmt.Errorf("--trust-domain: %w", err)
	}
	return s, nil
}

// sdsIssuer issues the workload certificates the xDS server serves Envoy
// nodes over SDS (docs/security.md, "Envoy over SDS").
type sdsIssuer struct{ id *identity.Service }

func (i sdsIssuer) IssueWorkload(ctx context.Context, ns, sa string) (xds.WorkloadCert, error) {
	a, err := i.id.Authority(ctx)
	if err != nil {
		return xds.WorkloadCert{}, err
	}
	now := time.Now()
	is, key, err := i.id.SignNewKey(ctx, ca.ID{TrustDomain: a.TrustDomain(), Namespace: ns, Account: sa}, 0)
	if err != nil {
		return xds.WorkloadCert{}, err
	}
	return xds.WorkloadCert{ID: is.ID.String(), ChainPEM: is.ChainPEM, KeyPEM: key, NotAfter: is.Leaf.NotAfter, Issued: now}, nil
}

func (i sdsIssuer) Bundle(ctx context.Context) ([]byte, error) {
	a, err := i.id.Authority(ctx)
	if err != nil {
		return nil, err
	}
	return a.Bundle(), nil
}
