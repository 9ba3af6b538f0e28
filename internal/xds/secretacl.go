package xds

import (
	"context"
	"slices"
	"strings"
)

// Who receives which SDS Secret. A Secret carries a TLS private key (or a
// CA): a stream receives it only if its SecretAccess allows the secret's
// namespace, and each one sent is reported to it (the audit log). A
// secret the stream may not have is treated as absent: never in a
// response, and reported removed to a delta client that holds it (its
// grant was taken away) or named it. Envoy keeps a listener or cluster
// whose secret is absent warming, as for one not created yet.

// SecretAccess is one stream's right to secrets (acl.SecretStream).
type SecretAccess interface {
	// Allows reports whether the stream may receive the secrets of
	// namespace ns; asked at every send, so it follows policy changes.
	Allows(ns string) bool
	// Sent reports the secret name (of namespace ns) at version sent to
	// the stream's node.
	Sent(ns, name, version, node string)
	// Changed returns a channel closed when Allows' answers may change
	// (nil: never).
	Changed() <-chan struct{}
}

// SecretNamespace returns the namespace of an SDS secret's name: what
// precedes its first "/" (CredentialSecret). A name without one has none.
func SecretNamespace(name string) (string, bool) {
	ns, _, ok := strings.Cut(name, "/")
	return ns, ok && ns != ""
}

type sentSecret struct {
	ns, name, version string
}

// secretAllowed reports whether the stream may receive secret id of tc,
// which it wants (true for other types, and for every secret without a
// SecretAccess). A secret refused is remembered (withheld) to be tried
// again when the stream's rights change. Called with s.mu and tc.mu held:
// Allows must not block (the guard's check is an atomic load and a map
// lookup).
func (s *subscriber) secretAllowed(tc *typeCache, id uint32) bool {
	if tc.typ != TypeSecret {
		return true
	}
	if s.wlKey != "" && id == s.wlID {
		if s.identityAllowed() {
			return true
		}
		s.withheld.Set(uint(id))
		return false
	}
	if s.secrets == nil || tc.names[id] == RootCertName {
		return true // the trust bundle is no secret (GET /v1/identity/bundle)
	}
	if ns, ok := SecretNamespace(tc.names[id]); ok && s.secrets.Allows(ns) {
		return true
	}
	s.withheld.Set(uint(id))
	return false
}

// noteSecret remembers a secret put in the response being built, to
// report once it is sent.
func (s *subscriber) noteSecret(tc *typeCache, e *entry) {
	if tc.typ != TypeSecret || s.secrets == nil {
		return
	}
	ns, _ := SecretNamespace(e.name)
	switch {
	case s.wlKey != "" && e.id == s.wlID:
		ns = s.ns // the workload's own key
	case e.name == RootCertName:
		return // the trust bundle is no secret
	}
	s.sentSecrets = append(s.sentSecrets, sentSecret{ns: ns, name: e.name, version: e.version})
}

// reportSecrets reports the secrets of the response just sent. Called by
// the send goroutine without s.mu.
func (s *subscriber) reportSecrets(list []sentSecret) {
	for _, x := range list {
		s.secrets.Sent(x.ns, x.name, x.version, s.node)
	}
}

// recheckSecrets, after a change of the stream's rights, marks pending the
// secrets it was refused (sent if now allowed) and, for a delta client,
// those it holds (reported removed if no longer allowed; one it may still
// have is not sent again). A state-of-the-world client cannot be told to
// drop a secret: it gets no new version of it.
func (s *subscriber) recheckSecrets(srv *Server) {
	srv.ensureWorkloadCert(s) // a grant given since the stream asked
	s.mu.Lock()
	st := &s.t[TypeSecret]
	if !st.requested {
		s.mu.Unlock()
		return
	}
	any := s.withheld.Any()
	st.pending.InPlaceUnion(&s.withheld)
	s.withheld.ClearAll()
	if s.delta {
		for id, seq := range st.sent {
			if seq != 0 {
				st.pending.Set(uint(id))
				any = true
			}
		}
	}
	if any {
		st.dirty = true
	}
	s.mu.Unlock()
	if any {
		s.poke()
	}
}

// secretAccessOf returns the stream's SecretAccess, or nil when every
// stream receives every secret.
func (s *Server) secretAccessOf(ctx context.Context) SecretAccess {
	if s.secretAccess == nil {
		return nil
	}
	return s.secretAccess(ctx)
}

// identityAllowed reports whether the stream may have its node's workload
// certificate: identity:write on its namespace (IdentityAccess), what the
// identity API asks to sign one; every stream without a SecretAccess.
func (s *subscriber) identityAllowed() bool {
	if s.secrets == nil {
		return true
	}
	ia, ok := s.secrets.(IdentityAccess)
	return ok && ia.AllowsIdentity(s.ns)
}

// workloadSecretKeys maps the workload secrets an Envoy node names to
// their cache keys ("default": its identity's certificate), publishing
// them first. Called without sub.mu: publishing notifies sub.
func (s *Server) workloadSecretKeys(sub *subscriber, req request) map[string]string {
	keys := map[string]string{}
	for _, list := range [][]string{req.names, req.subscribe, req.unsub, slices.Collect(mapKeys(req.initial))} {
		for _, n := range list {
			switch n {
			case CertificateName:
				sub.mu.Lock()
				if sub.wlKey == "" {
					sub.wlKey = certKey(sub.ns, sub.wlSA)
					sub.wlID = s.cache.types[TypeSecret].lookup(sub.wlKey)
				}
				key := sub.wlKey
				keys[n] = key
				sub.mu.Unlock()
				// Every ACK names it again: issue only what is not
				// published (RunWorkloads renews).
				if _, _, ok := s.cache.Get(TypeSecret, key); !ok {
					s.ensureWorkloadCert(sub)
				}
			case RootCertName:
				if _, _, ok := s.cache.Get(TypeSecret, RootCertName); ok {
					continue
				}
				if err := s.wl.ensureBundle(context.Background()); err != nil {
					s.log.Warn("xds: trust bundle for SDS", "node", sub.node, "err", err)
				}
			}
		}
	}
	return keys
}

// ensureWorkloadCert publishes the certificate of sub's identity if the
// stream may have it and it is not published (or is due for renewal).
func (s *Server) ensureWorkloadCert(sub *subscriber) {
	if s.wl == nil {
		return
	}
	sub.mu.Lock()
	key, ok := sub.wlKey, sub.wlKey != "" && sub.identityAllowed()
	sub.mu.Unlock()
	if !ok {
		return
	}
	if _, err := s.wl.ensureCert(context.Background(), sub.ns, sub.wlSA); err != nil {
		s.log.Warn("xds: workload certificate for SDS", "node", sub.node, "key", key, "err", err)
	}
}
