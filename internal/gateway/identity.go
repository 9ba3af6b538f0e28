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
	if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
		g.istio.setIstioSelf(leaf) // a sidecar's metrics name it
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
	secrets := g.tlsSecrets(g.sdsSecrets)
	for name, rt := range clusters {
		if rt.tls == nil {
			continue
		}
		conf, why := rt.spec.tls.config(secrets, rt.spec.h2c)
		// Every xDS response (clusters, endpoints, each secret) comes
		// here: say a change of the cluster's state once, not per update.
		switch was, seen := rt.tls.set(conf, why); {
		case why != "" && (!seen || was != why):
			g.log.Info("gateway: TLS cluster waits for its secrets", "cluster", name, "reason", why)
		case why == "" && seen && was != "":
			g.log.Info("gateway: TLS cluster has its secrets", "cluster", name)
		}
	}
}

// secretLabel names a secret in a reason: an SDS secret by its name, the
// identity as such.
func secretLabel(n string) string {
	if c, ok := strings.CutPrefix(n, providerPrefix); ok {
		return fmt.Sprintf("the gateway's identity (%s) not set (sextant gateway: run it with --identity-namespace and --identity-service-account; sextant sidecar: not yet received from --registry)", c)
	}
	return fmt.Sprintf("secret %q not received", n)
}

// tlsSecrets is what TLS listeners' chains and TLS clusters may name: the
// SDS secrets received (sds), and the gateway's identity. Caller holds g.mu.
func (g *Gateway) tlsSecrets(sds map[string]any) map[string]any {
	if len(g.identity) == 0 {
		return sds
	}
	out := make(map[string]any, len(sds)+len(g.identity))
	for k, v := range sds {
		out[k] = v
	}
	for k, v := range g.identity {
		out[k] = v
	}
	return out
}

// refreshDownstreamIdentity rebuilds the handshake config of every TLS
// chain (the identity changed): new handshakes present the new
// certificate and trust the new roots; connections open keep theirs.
// Caller holds g.mu.
func (g *Gateway) refreshDownstreamIdentity() {
	st := g.tls.Load()
	if st == nil {
		return
	}
	secrets := g.tlsSecrets(g.sdsSecrets)
	next := make(tlsState, len(*st))
	for port, l := range *st {
		next[port] = l.withSecrets(secrets)
	}
	g.tls.Store(&next)
}

// withSecrets returns a copy of l whose chains' handshake configs are
// rebuilt from secrets (chains shared between server names stay shared).
func (l *tlsListenerRT) withSecrets(secrets map[string]any) *tlsListenerRT {
	if l == nil {
		return nil
	}
	n := &tlsListenerRT{name: l.name, passthrough: l.passthrough, exact: make(map[string]*tlsChainRT, len(l.exact)),
		wild: make(map[string]*tlsChainRT, len(l.wild))}
	done := map[*tlsChainRT]*tlsChainRT{}
	re := func(c *tlsChainRT) *tlsChainRT {
		if c == nil {
			return nil
		}
		if x, ok := done[c]; ok {
			return x
		}
		x := *c
		if c.spec != nil && c.spec.tls != nil {
			x.conf, x.notReady = chainConfig(c.spec.tls, secrets)
		}
		done[c] = &x
		return &x
	}
	for k, c := range l.exact {
		n.exact[k] = re(c)
	}
	for k, c := range l.wild {
		n.wild[k] = re(c)
	}
	n.any, n.def, n.plain = re(l.any), re(l.def), l.plain
	return n
}
