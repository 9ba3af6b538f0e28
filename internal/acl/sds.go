package acl

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// The SDS side of the guard. A Secret resource carries a private key: an
// xDS stream receives one only if its token holds secret:read on the
// secret's namespace (push:read, which opens the stream, is not enough;
// anonymous callers never get one), and every secret sent leaves an audit
// record. Without ACLs every stream receives every secret (records are
// still written when an audit log is set).

// SecretStream is one xDS stream's view of the secrets. Its methods are
// safe for concurrent use.
type SecretStream struct {
	st *state
}

// SDS returns the secret view of ctx's caller (a stream that passed
// the guard's StreamInterceptor). Outside the guard it allows nothing.
func SDS(ctx context.Context) *SecretStream {
	return &SecretStream{st: stateFrom(ctx)}
}

// Allows reports whether the caller may receive the secrets of namespace
// ns. It reads the current policies: call it at each send.
func (s *SecretStream) Allows(ns string) bool {
	if s.st == nil || ns == "" {
		return false
	}
	return s.st.g.check(s.st, Permission{Resource: Secrets, Access: Read, Namespace: ns}) == nil
}

// Changed returns a channel closed at the next change of any token or
// policy: Allows' answers may have changed.
func (s *SecretStream) Changed() <-chan struct{} {
	if s.st == nil {
		return nil
	}
	return s.st.g.Changed()
}

// sdsAuditWindow is how long after a record of a secret's version sent to
// a caller's node the same version sent to the same caller and node again
// is counted rather than recorded: a reconnecting gateway is sent its
// secrets again on every stream, and a reconnect storm must not become a
// storm of records. A new version, another secret, caller or node is
// recorded at once.
const sdsAuditWindow = time.Minute

// maxSDSAuditKeys bounds the remembered (caller, node, secret, version) keys;
// past it, expired keys are dropped, and if none has expired a send is
// recorded without being remembered (more records, never fewer).
const maxSDSAuditKeys = 1 << 16

type sdsAuditKey struct {
	caller, node, ns, name, version string
}

type sdsAuditSeen struct {
	at      time.Time // of the last record
	resends int       // sends counted since it
}

type sdsAudit struct {
	mu   sync.Mutex
	seen map[sdsAuditKey]*sdsAuditSeen
}

// Sent records that the secret name (of namespace ns) at version was sent
// to the caller's xDS node: one audit record, msg=audit, result=sent,
// naming the caller (accessor, remote address, node) and the secret. The
// same version sent to the same caller and node within sdsAuditWindow of
// its record is counted, and the next record says how many
// (resent_since_last_record).
func (s *SecretStream) Sent(ns, name, version, node string) {
	if s.st == nil || s.st.g.audit == nil {
		return
	}
	g := s.st.g
	caller := s.st.accessor
	if caller == "" {
		caller = "@" + s.st.remote // without ACLs: the client address
	}
	now := g.opts.Now()
	resends, record := g.sds.note(sdsAuditKey{caller, node, ns, name, version}, now)
	if !record {
		return
	}
	extra := []slog.Attr{slog.String("node", node), slog.String("secret", name), slog.String("version", version)}
	if resends > 0 {
		extra = append(extra, slog.Int("resent_since_last_record", resends))
	}
	g.auditRecordNS(s.st, ns, "sent", extra...)
}

// note reports whether a send of k at now is recorded, and how many sends
// of k were counted since its last record.
func (a *sdsAudit) note(k sdsAuditKey, now time.Time) (resends int, record bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = make(map[sdsAuditKey]*sdsAuditSeen)
	}
	if e := a.seen[k]; e != nil {
		if now.Sub(e.at) < sdsAuditWindow {
			e.resends++
			return 0, false
		}
		resends = e.resends
		e.at, e.resends = now, 0
		return resends, true
	}
	if len(a.seen) >= maxSDSAuditKeys {
		for key, e := range a.seen {
			if now.Sub(e.at) >= sdsAuditWindow {
				delete(a.seen, key)
			}
		}
		if len(a.seen) >= maxSDSAuditKeys {
			return 0, true
		}
	}
	a.seen[k] = &sdsAuditSeen{at: now}
	return 0, true
}

// auditRecordNS writes one audit record for st's caller about namespace
// ns alone (not the namespaces st's checks touched).
func (g *Guard) auditRecordNS(st *state, ns, result string, extra ...slog.Attr) {
	one := &state{g: g, accessor: st.accessor, remote: st.remote, op: st.op}
	one.ns = append(one.nsBuf[:0], ns)
	g.auditRecord(one, result, 0, extra...)
}

// AllowsIdentity reports whether the caller may have the workload
// identities of namespace ns (identity:write, what the identity API asks
// to sign one): the xDS server then serves an Envoy node the SDS secret
// "default", its certificate and key. Read at each send, as Allows.
func (s *SecretStream) AllowsIdentity(ns string) bool {
	if s.st == nil || ns == "" {
		return false
	}
	return s.st.g.check(s.st, Permission{Resource: Identity, Access: Write, Namespace: ns}) == nil
}
