package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// The gateway's own workload identity (a DestinationRule's ISTIO_MUTUAL,
// a Gateway server's ISTIO_MUTUAL): a cluster's or a TLS filter chain's
// certificate provider instance (gRFC A29, what Sextant's control plane
// names for the mesh's mutual TLS) is the gateway's identity, which its owner keeps fresh with SetIdentity (sextant gateway
// --identity-namespace/--identity-service-account get it from the
// server's certificate authority, as "sextant identity agent" does).

// providerPrefix marks, among a cluster's secret names, those of the
// certificate provider rather than SDS.
const providerPrefix = "provider:"

// SetIdentity sets the certificate (chain, leaf first), its key and the
// trust bundle the gateway presents and trusts for clusters that name a
// certificate provider instance (certificate "default", roots "ROOTCA"),
// and rebuilds those clusters' handshake configs: new connections use the
// new identity, open ones keep theirs. Any goroutine.
func (g *Gateway) SetIdentity(certPEM, keyPEM, bundlePEM []byte) error {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("gateway: identity certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundlePEM) {
		return errors.New("gateway: identity trust bundle: no PEM certificate")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.identity = map[string]any{
		providerPrefix + "default": &secretSpec{name: "default", cert: &cert},
		providerPrefix + "ROOTCA":  &secretSpec{name: "ROOTCA", ca: pool},
	}
	g.refreshUpstreamTLS(g.clusters)
	g.refreshDownstreamIdentity()
	return nil
}

// refreshUpstreamTLS rebuilds the handshake config of every TLS cluster of
// clusters from the secrets received and the identity. Caller holds g.mu.
func (g *Gateway) refreshUpstreamTLS(clusters map[string]*clusterRT) {
	secrets := make(map[string]any, len(g.sdsSecrets)+len(g.identity))
	for k, v := range g.sdsSecrets {
		secrets[k] = v
	}
	for k, v := range g.identity {
		secrets[k] = v
	}
	for name, rt := range clusters {
		if rt.tls == nil {
			continue
		}
		conf, why := rt.spec.tls.config(secrets, rt.spec.h2c)
		rt.tls.set(conf, why)
		if why != "" {
			g.log.Info("gateway: TLS cluster waits for its secrets", "cluster", name, "reason", why)
		}
	}
}

// secretLabel names a secret in a reason: an SDS secret by its name, the
// identity as such.
func secretLabel(n string) string {
	if c, ok := strings.CutPrefix(n, providerPrefix); ok {
		return fmt.Sprintf("the gateway's identity (%s) not set (run it with --identity-namespace and --identity-service-account)", c)
	}
	return fmt.Sprintf("secret %q not received", n)
}
