package acl

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Options configure a Guard; the zero value is ACLs off, no limits, no audit.
type Options struct {
	// Enabled turns ACLs on: every request needs a valid token, except
	// anonymous reads when AnonymousRead is set.
	Enabled bool
	// AnonymousRead lets callers without a token read instances, config,
	// placements and push status in every namespace (never tokens,
	// policies or secrets).
	AnonymousRead bool
	// WriteRate and ReadRate limit each caller (a token, or the client
	// address of an anonymous caller); zero: no limit. Requests other than
	// GET and HEAD are writes.
	WriteRate, ReadRate Rate
	// Audit receives one record per write and per refused request (nil:
	// none), at Info level; NewAuditHandler is made for it.
	Audit *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Guard authenticates callers, checks their permissions, limits their
// rate and audits what they do. Its methods are safe for concurrent use;
// the checks take no lock (the snapshot is one atomic pointer, a caller's
// rate one atomic cell); the audit record takes its writer's.
type Guard struct {
	opts          Options
	snap          atomic.Pointer[snapshot]
	tokens        *tokenTable
	policies      *policyTable
	writes, reads *limiter
	audit         *slog.Logger
	changed       atomic.Pointer[chan struct{}] // closed at every ACL change
	sds           sdsAudit                      // secrets sent over SDS, for their audit records (sds.go)
}

// New returns a guard with empty token and policy tables; register them
// with the write engine (Tables) so that they follow the store.
func New(opts Options) *Guard {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	g := &Guard{opts: opts, audit: opts.Audit}
	g.tokens = &tokenTable{g: g}
	g.policies = &policyTable{g: g}
	g.tokens.m.Store(&map[string]*Token{})
	g.policies.m.Store(&map[string]*Policy{})
	g.snap.Store(buildSnapshot(nil, nil))
	ch := make(chan struct{})
	g.changed.Store(&ch)
	if opts.WriteRate.on() {
		g.writes = newLimiter(opts.WriteRate)
	}
	if opts.ReadRate.on() {
		g.reads = newLimiter(opts.ReadRate)
	}
	return g
}

// Tables returns the catalog tables of the token and policy kinds, for
// commit.Options.Tables.
func (g *Guard) Tables() map[store.Kind]catalog.Table {
	return map[store.Kind]catalog.Table{store.Tokens: g.tokens, store.Policies: g.policies}
}

// Enabled reports whether ACLs are on.
func (g *Guard) Enabled() bool { return g.opts.Enabled }

// rebuild compiles the tables' current state; called by the catalog's
// writer after each change of either table.
func (g *Guard) rebuild() {
	g.snap.Store(buildSnapshot(*g.tokens.m.Load(), *g.policies.m.Load()))
	ch := make(chan struct{})
	close(*g.changed.Swap(&ch))
}

// Changed returns a channel closed at the next change of any token or
// policy, for holders of long streams that re-check their caller.
func (g *Guard) Changed() <-chan struct{} { return *g.changed.Load() }

// state is one request's (or stream's) caller and what its checks saw,
// for the audit record.
type state struct {
	g        *Guard
	accessor string // "" for anonymous
	remote   string
	op       string

	mu      sync.Mutex
	write   bool      // a write permission was checked
	ns      []string  // namespaces checked
	nsBuf   [2]string // ns's first backing array: no allocation for most requests
	nsMore  bool      // more namespaces than an audit record lists
	missing string    // the permission a check refused
	refused *Error    // the refusal at the door (authentication, rate)
}

type ctxKey struct{}

// maxAuditNamespaces bounds the namespaces one audit record lists (a batch
// may touch thousands); the record says when there were more.
const maxAuditNamespaces = 16

func stateFrom(ctx context.Context) *state {
	st, _ := ctx.Value(ctxKey{}).(*state)
	return st
}

// Caller names the caller of ctx for logs: a token's accessor, "anonymous",
// or "" outside the guard. Never a secret.
func Caller(ctx context.Context) string {
	st := stateFrom(ctx)
	switch {
	case st == nil:
		return ""
	case st.accessor == "":
		return "anonymous"
	}
	return st.accessor
}

// authenticate resolves a presented token (as from an Authorization
// header, "" if none) into st, or refuses it. Without a token the caller
// is anonymous, refused at the door unless anonymous reads are allowed or
// the route is open (its handler decides).
func (g *Guard) authenticate(st *state, bearer string, present, open bool) *Error {
	if !g.opts.Enabled {
		return nil
	}
	if !present {
		if g.opts.AnonymousRead || open {
			return nil
		}
		return unauthenticated("a token is required: send Authorization: Bearer <token>")
	}
	acc, secret, err := ParseSecret(bearer)
	if err != nil {
		return unauthenticated("the token is malformed: want sxt_<accessor>_<secret> as printed at its creation")
	}
	p := g.snap.Load().tokens[acc]
	st.accessor = acc
	if p == nil || !p.token.matches(&secret) {
		return unauthenticated("the token is not valid: unknown, revoked, or a wrong secret (accessor " + acc + ")")
	}
	return nil
}

// limit takes a token of the caller's bucket; the key is the accessor or,
// for anonymous callers, the client's IP address.
func (g *Guard) limit(st *state, write bool) *Error {
	l, kind := g.reads, "reads"
	if write {
		l, kind = g.writes, "writes"
	}
	if l == nil {
		return nil
	}
	key, who := st.accessor, "token"
	if key == "" {
		key, who = "@"+st.remote, "client address"
	}
	v := l.allow(key, g.opts.Now().UnixNano())
	if v.ok {
		return nil
	}
	secs := max(1, int64((v.retryAfter+time.Second-1)/time.Second))
	e := &Error{Code: "resource_exhausted", err: ErrRateLimited, RetryAfter: time.Duration(secs) * time.Second,
		Msg: fmt.Sprintf("rate limit of %g %s/s per %s exceeded; retry after %ds", l.rate.PerSecond, kind, who, secs)}
	if v.report {
		g.auditRecord(st, "rate_limited", 0, slog.Int("refused_since_last_record", v.refused))
	}
	return e
}

// Begin authenticates and rate-limits an HTTP request and returns it with
// its caller in its context (also when it refuses it, so that End can
// audit the refusal). The refusal is an *Error to answer. With ACLs on, a
// request without a token is refused here unless anonymous reads are
// allowed.
func (g *Guard) Begin(r *http.Request, op string) (*http.Request, error) {
	return g.begin(r, op, false)
}

// BeginOpen is Begin for a route that anonymous callers may reach (the
// bootstrap): a token, if presented, must still be valid.
func (g *Guard) BeginOpen(r *http.Request, op string) (*http.Request, error) {
	return g.begin(r, op, true)
}

func (g *Guard) begin(r *http.Request, op string, open bool) (*http.Request, error) {
	st := &state{g: g, op: op}
	st.ns = st.nsBuf[:0]
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		st.remote = host
	} else {
		st.remote = r.RemoteAddr
	}
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, st))
	h := r.Header.Get("Authorization")
	bearer, ok := ParseBearer(h)
	if h != "" && !ok && g.opts.Enabled {
		st.refused = unauthenticated("the Authorization header is not \"Bearer <token>\"")
		return r, st.refused
	}
	if e := g.authenticate(st, bearer, ok, open); e != nil {
		st.refused = e
		return r, e
	}
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	if e := g.limit(st, write); e != nil {
		st.refused = e
		return r, e
	}
	return r, nil
}

// End audits a request Begin let in or refused, by its answer's status:
// every write (a method other than GET and HEAD, or a write permission
// checked) and every refusal.
func (g *Guard) End(r *http.Request, status int) {
	st := stateFrom(r.Context())
	if st == nil || g.audit == nil {
		return
	}
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	st.mu.Lock()
	write = write || st.write
	refused := st.refused
	st.mu.Unlock()
	switch {
	case refused != nil && refused.Code == "resource_exhausted":
		return // audited by limit, at most once a second per caller
	case refused != nil:
		g.auditRecord(st, refused.Code, status)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		g.auditRecord(st, "denied", status)
	case write:
		result := "ok"
		if status >= 400 {
			result = "failed"
		}
		g.auditRecord(st, result, status)
	}
}

// auditRecord writes one audit record: time (the record's), the caller's
// accessor (never a secret), client address, operation, namespaces,
// result, status and the permission that was missing.
func (g *Guard) auditRecord(st *state, result string, status int, extra ...slog.Attr) {
	if g.audit == nil {
		return
	}
	caller := st.accessor
	if caller == "" {
		caller = "anonymous"
	}
	st.mu.Lock()
	var ns slog.Attr
	switch len(st.ns) {
	case 0:
		ns = slog.String("namespace", "")
	case 1:
		ns = slog.String("namespace", st.ns[0])
	default:
		ns = slog.Any("namespace", append([]string(nil), st.ns...))
	}
	missing, more := st.missing, st.nsMore
	st.mu.Unlock()
	var buf [10]slog.Attr
	attrs := append(buf[:0], slog.String("accessor", caller), slog.String("remote", st.remote),
		slog.String("op", st.op), ns, slog.String("result", result))
	if status != 0 {
		attrs = append(attrs, slog.Int("status", status))
	}
	if missing != "" {
		attrs = append(attrs, slog.String("missing", missing))
	}
	if more {
		attrs = append(attrs, slog.Bool("more_namespaces", true))
	}
	attrs = append(attrs, extra...)
	// A record made here, not by Logger.LogAttrs: that one asks the
	// runtime for the caller's PC (a tenth of the record's cost), and an
	// audit record has no use for its source line.
	h := g.audit.Handler()
	ctx := context.Background()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	rec := slog.NewRecord(g.opts.Now(), slog.LevelInfo, "audit", 0)
	rec.AddAttrs(attrs...)
	_ = h.Handle(ctx, rec) // the handler's own errors have nowhere better to go
}

// Wrap runs h behind the guard: authentication, rate limit, audit, and
// the API's error body (docs/api.md) for a refusal. op names the
// operation in audit records ("" : the method and path). h calls Require.
func (g *Guard) Wrap(op string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := op
		if name == "" {
			name = r.Method + " " + r.URL.Path
		}
		r, err := g.Begin(r, name)
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		if err != nil {
			WriteError(sw, err)
		} else {
			h.ServeHTTP(sw, r)
		}
		g.End(r, sw.code)
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// WriteError answers an *Error (or any error, as internal) with the API's
// error body and, for rate limits, Retry-After.
func WriteError(w http.ResponseWriter, err error) {
	e, ok := err.(*Error)
	if !ok {
		e = &Error{Code: "internal", Msg: err.Error()}
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(e.RetryAfter/time.Second), 10))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status())
	fmt.Fprintf(w, "{\"error\":{\"code\":%q,\"message\":%s}}\n", e.Code, strconv.Quote(e.Msg))
}

// Require checks that the caller of r holds p. It answers nil, or an
// *Error: unauthenticated (no token, or it was revoked meanwhile),
// permission_denied (naming p), or internal if r did not pass through
// the guard. Cheap: one atomic load and a map lookup; call it again after
// a long wait (a blocking query) so that a revocation meanwhile counts.
func Require(r *http.Request, p Permission) error { return RequireContext(r.Context(), p) }

// RequireContext is Require for a context from the guard (HTTP or gRPC).
func RequireContext(ctx context.Context, p Permission) error {
	st := stateFrom(ctx)
	if st == nil {
		return errNotWrapped
	}
	st.mu.Lock()
	if p.Access == Write {
		st.write = true
	}
	if p.Namespace != "" && !slices.Contains(st.ns, p.Namespace) {
		if len(st.ns) < maxAuditNamespaces {
			st.ns = append(st.ns, p.Namespace)
		} else {
			st.nsMore = true
		}
	}
	st.mu.Unlock()
	if err := st.g.check(st, p); err != nil {
		st.mu.Lock()
		st.missing = p.String()
		st.mu.Unlock()
		return err
	}
	return nil
}

// Check is RequireContext without a trace in the audit record, for checks
// made on behalf of a request by another goroutine (a registry applier
// checking the instance a write would replace). It must not block.
func Check(ctx context.Context, p Permission) error {
	st := stateFrom(ctx)
	if st == nil {
		return errNotWrapped
	}
	return st.g.check(st, p)
}

// Authenticated checks that the caller may use the server at all: a valid
// token, or anonymous reads allowed. For routes that read no namespaced
// data (/metrics, /v1/acl/self).
func Authenticated(ctx context.Context) error {
	st := stateFrom(ctx)
	if st == nil {
		return errNotWrapped
	}
	if !st.g.opts.Enabled {
		return nil
	}
	if st.accessor == "" {
		if st.g.opts.AnonymousRead {
			return nil
		}
		return unauthenticated("a token is required: send Authorization: Bearer <token>")
	}
	if st.g.snap.Load().tokens[st.accessor] == nil {
		return unauthenticated("the token was revoked (accessor " + st.accessor + ")")
	}
	return nil
}

func (g *Guard) check(st *state, p Permission) error {
	if !g.opts.Enabled {
		return nil
	}
	if st.accessor == "" {
		// Anonymous reads never reach secrets: their metadata (HTTP) nor
		// their keys (SDS).
		if g.opts.AnonymousRead && p.Access <= Read && p.Resource != ACL && p.Resource != Secrets {
			return nil
		}
		if g.opts.AnonymousRead && p.Resource == Secrets {
			return unauthenticated("a token is required for " + p.String() + " (anonymous callers never read secrets)")
		}
		if g.opts.AnonymousRead {
			return unauthenticated("a token is required for " + p.String() + " (anonymous callers may only read)")
		}
		return unauthenticated("a token is required for " + p.String())
	}
	pr := g.snap.Load().tokens[st.accessor]
	if pr == nil {
		return unauthenticated("the token was revoked (accessor " + st.accessor + ")")
	}
	if pr.grants.allows(p) {
		return nil
	}
	return denied("the token (accessor " + st.accessor + ") lacks " + p.String())
}

// Filter tells which namespaces a caller may read of one resource, for
// listings and subscriptions. It reads the current policies at each call,
// so a subscriber loses what a revocation or a policy change takes away.
type Filter struct {
	st  *state
	res Resource
}

// Readable returns the filter of ctx's caller for res. Outside the guard
// it allows nothing.
func Readable(ctx context.Context, res Resource) Filter {
	return Filter{st: stateFrom(ctx), res: res}
}

// All reports whether the caller may read res in every namespace (ACLs
// off, anonymous reads, admin, or a rule for "*"): no need to filter.
func (f Filter) All() bool {
	if f.st == nil {
		return false
	}
	return f.st.g.check(f.st, Permission{Resource: f.res, Access: Read}) == nil
}

// Allows reports whether the caller may read res in namespace ns.
func (f Filter) Allows(ns string) bool {
	if f.st == nil || ns == "" {
		return false
	}
	return f.st.g.check(f.st, Permission{Resource: f.res, Access: Read, Namespace: ns}) == nil
}

// Any reports whether the caller may read res in at least one namespace.
func (f Filter) Any() bool {
	if f.st == nil {
		return false
	}
	g := f.st.g
	if g.check(f.st, Permission{Resource: f.res, Access: Read}) == nil {
		return true
	}
	if f.st.accessor == "" {
		return false
	}
	pr := g.snap.Load().tokens[f.st.accessor]
	return pr != nil && pr.grants.any(f.res, Read)
}
