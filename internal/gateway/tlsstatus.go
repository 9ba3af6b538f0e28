package gateway

import (
	"crypto/x509"
	"slices"
	"sort"
	"strings"
	"time"
)

// tlsPortStatus is one TLS port as the admin API shows it: the listener
// served there and its filter chains, with each certificate's subject and
// expiry (never a key), so an operator (and the console) sees what a
// client's handshake gets and when it stops working.
type tlsPortStatus struct {
	Port     uint32           `json:"port"`
	Listener string           `json:"listener,omitempty"` // empty: no TLS listener for this port yet
	Chains   []tlsChainStatus `json:"chains"`
}

type tlsChainStatus struct {
	ServerNames []string `json:"server_names"` // empty: any name
	Default     bool     `json:"default,omitempty"`
	Ready       bool     `json:"ready"`
	NotReady    string   `json:"not_ready,omitempty"`
	// ClientCertificate is "required", "optional" (verified when given) or
	// "none".
	ClientCertificate string       `json:"client_certificate"`
	ClientCA          string       `json:"client_ca_secret,omitempty"`
	Certificates      []certStatus `json:"certificates"`
	// Plaintext marks an inbound listener's plaintext chain (PERMISSIVE,
	// DISABLE: inbound.go), ready without a certificate.
	Plaintext bool `json:"plaintext,omitempty"`
	// Passthrough names the clusters a TLS passthrough chain forwards to
	// (it has no certificate: the endpoint does the handshake).
	Passthrough []string `json:"passthrough_clusters,omitempty"`
}

type certStatus struct {
	Secret   string    `json:"secret,omitempty"` // empty: inline in the listener
	Subject  string    `json:"subject"`
	DNSNames []string  `json:"dns_names,omitempty"`
	NotAfter time.Time `json:"not_after"`
	Expired  bool      `json:"expired"`
}

// tlsStatus describes the TLS listeners served now, by port.
func (g *Gateway) tlsStatus(now time.Time) []tlsPortStatus {
	st := g.tls.Load()
	if st == nil {
		return []tlsPortStatus{}
	}
	out := make([]tlsPortStatus, 0, len(*st))
	for port, l := range *st {
		ps := tlsPortStatus{Port: port, Chains: []tlsChainStatus{}}
		if l != nil {
			ps.Listener = l.name
			for _, c := range l.chains() {
				ps.Chains = append(ps.Chains, chainStatus(c, now))
			}
			sort.Slice(ps.Chains, func(i, j int) bool {
				return strings.Join(ps.Chains[i].ServerNames, ",") < strings.Join(ps.Chains[j].ServerNames, ",")
			})
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

func chainStatus(c *tlsChainRT, now time.Time) tlsChainStatus {
	cs := tlsChainStatus{ServerNames: []string{}, Ready: c.conf != nil, NotReady: c.notReady,
		ClientCertificate: "none", Certificates: []certStatus{}}
	if c.spec == nil {
		return cs
	}
	cs.ServerNames = slices.Clone(c.spec.serverNames)
	if cs.ServerNames == nil {
		cs.ServerNames = []string{}
	}
	cs.Default = c.spec.isDefault
	if c.tcp != nil {
		cs.Ready, cs.NotReady = true, ""
		for _, cw := range c.tcp.spec.clusters {
			cs.Passthrough = append(cs.Passthrough, cw.name)
		}
		return cs
	}
	t := c.spec.tls
	if t == nil {
		cs.Ready, cs.NotReady, cs.Plaintext = c.table != nil, "", c.table != nil
		return cs
	}
	cs.ClientCA = t.caSecret
	switch {
	case t.requireCert:
		cs.ClientCertificate = "required"
	case t.hasValidator:
		cs.ClientCertificate = "optional"
	}
	if c.conf == nil {
		return cs
	}
	// conf.Certificates holds the inline certificates, then one per SDS
	// secret in order (chainConfig).
	for i, kp := range c.conf.Certificates {
		leaf := kp.Leaf
		if leaf == nil && len(kp.Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(kp.Certificate[0])
		}
		if leaf == nil {
			continue
		}
		s := certStatus{Subject: leaf.Subject.String(), DNSNames: leaf.DNSNames, NotAfter: leaf.NotAfter.UTC(),
			Expired: now.After(leaf.NotAfter)}
		if j := i - len(t.certs); j >= 0 && j < len(t.certSecrets) {
			s.Secret = t.certSecrets[j]
		}
		cs.Certificates = append(cs.Certificates, s)
	}
	return cs
}
