package acl

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Submitter queues a write on the write engine's group commit and waits until
// it is durable and applied (commit.Engine.Submit). Called from the
// request's goroutine; blocks.
type Submitter interface {
	Submit(ctx context.Context, w commit.Write) (int64, error)
}

// BootstrapKey is the System record that marks ACLs as bootstrapped. It
// is created only if absent, checked by the store at commit, so one
// bootstrap wins across every server of a cluster.
const BootstrapKey = "acl-bootstrap"

// The appliers: one commit.Write per request shape. Each plans against
// the batch's view (tx.Get) and states what it depends on as commit-time
// conditions (PutIf, DeleteIf), so that a concurrent write on another
// server fails it instead of being overwritten.

type bootstrapWrite struct {
	tok    *Token
	marker *catalog.Blob
}

func (w *bootstrapWrite) Plan(tx *commit.Tx) error {
	if v, _ := tx.Get(store.System, BootstrapKey); v != nil {
		return errBootstrapped(v)
	}
	tx.PutIf(store.System, BootstrapKey, w.marker.Value, w.marker, 0)
	tx.PutIf(store.Tokens, w.tok.AccessorID, tx.Encode(func(b []byte) []byte { return append(b, encodeToken(w.tok)...) }), w.tok, 0)
	return nil
}

func errBootstrapped(v any) error {
	msg := "ACLs are already bootstrapped; a second bootstrap is refused. Ask a holder of an admin token to create a token for you"
	if b, ok := v.(*catalog.Blob); ok {
		var m struct {
			At time.Time `json:"at"`
		}
		if json.Unmarshal(b.Value, &m) == nil && !m.At.IsZero() {
			msg = fmt.Sprintf("ACLs were already bootstrapped at %s (revision %d); a second bootstrap is refused. Ask a holder of an admin token to create a token for you",
				m.At.Format(time.RFC3339), b.Revision)
		}
	}
	return &Error{Code: "conflict", Msg: msg, err: ErrBootstrapped}
}

type createTokenWrite struct {
	tok *Token
}

func (w *createTokenWrite) Plan(tx *commit.Tx) error {
	for i, name := range w.tok.Policies {
		if name == BuiltinAdmin {
			continue
		}
		if v, _ := tx.Get(store.Policies, name); v == nil {
			return fieldErr(fmt.Sprintf("policies[%d]", i), "no policy named %q", name)
		}
	}
	tx.PutIf(store.Tokens, w.tok.AccessorID, tx.Encode(func(b []byte) []byte { return append(b, encodeToken(w.tok)...) }), w.tok, 0)
	return nil
}

type deleteTokenWrite struct {
	accessor string
}

func (w *deleteTokenWrite) Plan(tx *commit.Tx) error {
	v, rev := tx.Get(store.Tokens, w.accessor)
	if v == nil {
		return &Error{Code: "not_found", Msg: fmt.Sprintf("no token with accessor %q", w.accessor), err: ErrNotFound}
	}
	tx.DeleteIf(store.Tokens, w.accessor, rev)
	return nil
}

type putPolicyWrite struct {
	p      *Policy
	create bool // create only; else replace only
}

func (w *putPolicyWrite) Plan(tx *commit.Tx) error {
	v, rev := tx.Get(store.Policies, w.p.Name)
	switch {
	case w.create && v != nil:
		return &Error{Code: "conflict", Msg: fmt.Sprintf("policy %q exists; replace it with PUT /v1/acl/policies/%s", w.p.Name, w.p.Name), err: ErrExists}
	case !w.create && v == nil:
		return &Error{Code: "not_found", Msg: fmt.Sprintf("no policy named %q", w.p.Name), err: ErrNotFound}
	}
	tx.PutIf(store.Policies, w.p.Name, tx.Encode(func(b []byte) []byte { return append(b, encodePolicy(w.p)...) }), w.p, rev)
	return nil
}

type deletePolicyWrite struct {
	name string
}

func (w *deletePolicyWrite) Plan(tx *commit.Tx) error {
	v, rev := tx.Get(store.Policies, w.name)
	if v == nil {
		return &Error{Code: "not_found", Msg: fmt.Sprintf("no policy named %q", w.name), err: ErrNotFound}
	}
	tx.DeleteIf(store.Policies, w.name, rev)
	return nil
}

// Bootstrap creates the first token, linked to the built-in admin policy,
// once: a second call (on any server sharing the store) answers an *Error
// wrapping ErrBootstrapped. It returns the token and its secret, which is
// not kept anywhere.
func (g *Guard) Bootstrap(ctx context.Context, sub Submitter, description string) (*Token, string, error) {
	if description == "" {
		description = "bootstrap token"
	}
	now := g.opts.Now()
	tok, secret, err := newToken(description, []string{BuiltinAdmin}, now)
	if err != nil {
		return nil, "", err
	}
	marker, _ := json.Marshal(struct {
		At       time.Time `json:"at"`
		Accessor string    `json:"accessor_id"`
	}{now.UTC(), tok.AccessorID})
	_, err = sub.Submit(ctx, &bootstrapWrite{tok: tok, marker: &catalog.Blob{Key: BootstrapKey, Value: marker}})
	var ce *store.ConflictError
	if errors.As(err, &ce) && ce.Kind == store.System {
		return nil, "", errBootstrapped(nil) // another server won the race
	}
	if err != nil {
		return nil, "", err
	}
	return tok, secret, nil
}

// CreateToken creates a token linked to the policies of req (which must
// exist) and returns it and its secret, shown once.
func (g *Guard) CreateToken(ctx context.Context, sub Submitter, req *TokenRequest) (*Token, string, error) {
	if err := req.Validate(); err != nil {
		return nil, "", err
	}
	tok, secret, err := newToken(req.Description, slices.Clone(req.Policies), g.opts.Now())
	if err != nil {
		return nil, "", err
	}
	if _, err := sub.Submit(ctx, &createTokenWrite{tok: tok}); err != nil {
		return nil, "", err
	}
	return tok, secret, nil
}

// DeleteToken revokes a token: once it answers, every server that has
// applied the revision refuses the token.
func (g *Guard) DeleteToken(ctx context.Context, sub Submitter, accessor string) (int64, error) {
	if !ValidAccessor(accessor) {
		return 0, fieldErr("accessor_id", "%q is not an accessor id (24 hex characters)", accessor)
	}
	return sub.Submit(ctx, &deleteTokenWrite{accessor: accessor})
}

// PutPolicy creates (create) or replaces a validated policy.
func (g *Guard) PutPolicy(ctx context.Context, sub Submitter, p *Policy, create bool) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	q := *p
	q.Revision, q.Builtin = 0, false
	return sub.Submit(ctx, &putPolicyWrite{p: &q, create: create})
}

// DeletePolicy deletes a policy; tokens linked to it lose what it granted.
func (g *Guard) DeletePolicy(ctx context.Context, sub Submitter, name string) (int64, error) {
	if name == BuiltinAdmin {
		return 0, &Error{Code: "invalid_argument", Msg: fmt.Sprintf("%q is the built-in policy and cannot be deleted", name)}
	}
	if !naming.ValidName(name) {
		return 0, fieldErr("name", "%q is not a policy name", name)
	}
	return sub.Submit(ctx, &deletePolicyWrite{name: name})
}

// Tokens lists the tokens by creation time (no secrets: the server has none).
func (g *Guard) Tokens() []*Token {
	m := *g.tokens.m.Load()
	out := make([]*Token, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Token) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.AccessorID, b.AccessorID))
	})
	return out
}

// Token returns one token.
func (g *Guard) Token(accessor string) (*Token, bool) {
	t, ok := (*g.tokens.m.Load())[accessor]
	return t, ok
}

// Policies lists the policies by name, the built-in admin policy included.
func (g *Guard) Policies() []*Policy {
	s := g.snap.Load()
	out := make([]*Policy, 0, len(s.policies))
	for _, p := range s.policies {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Policy) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Policy returns one policy (the built-in one included).
func (g *Guard) Policy(name string) (*Policy, bool) {
	p, ok := g.snap.Load().policies[name]
	return p, ok
}

// Self returns the caller's token, or nil for an anonymous caller.
func Self(ctx context.Context) (*Token, error) {
	if err := Authenticated(ctx); err != nil {
		return nil, err
	}
	st := stateFrom(ctx)
	if st.accessor == "" {
		return nil, nil
	}
	pr := st.g.snap.Load().tokens[st.accessor]
	if pr == nil {
		return nil, unauthenticated("the token was revoked (accessor " + st.accessor + ")")
	}
	return pr.token, nil
}
