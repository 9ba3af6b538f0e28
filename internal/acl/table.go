package acl

import (
	"fmt"
	"maps"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// The catalog tables of tokens and policies: a map per kind, replaced
// whole at each change (they are small and change rarely), after which
// the guard compiles a new snapshot. The catalog's writer calls Load and
// Apply; planners call Record.

// Each kind is one group, so a blocking read of a listing wakes on any
// change of the kind.
var (
	tokensGroup   = naming.ServiceKey{Name: "tokens"}
	policiesGroup = naming.ServiceKey{Name: "policies"}
)

type tokenTable struct {
	g *Guard
	m atomic.Pointer[map[string]*Token]
}

var _ catalog.Table = (*tokenTable)(nil)

func (t *tokenTable) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	tok, err := decodeToken(rec.Value, rec.Revision)
	if err != nil {
		return nil, tokensGroup, err
	}
	if tok.AccessorID != rec.Key {
		return nil, tokensGroup, fmt.Errorf("acl: token record %q holds accessor %q", rec.Key, tok.AccessorID)
	}
	return tok, tokensGroup, nil
}

func (t *tokenTable) Adopt(obj any, rev int64) (naming.ServiceKey, error) {
	tok, ok := obj.(*Token)
	if !ok {
		return tokensGroup, fmt.Errorf("acl: token record carries a %T", obj)
	}
	tok.Revision = rev
	return tokensGroup, nil
}

func (t *tokenTable) Group(id string) (naming.ServiceKey, bool) {
	_, ok := (*t.m.Load())[id]
	return tokensGroup, ok
}

func (t *tokenTable) Load(rev int64, values []any) {
	m := make(map[string]*Token, len(values))
	for _, v := range values {
		tok := v.(*Token)
		m[tok.AccessorID] = tok
	}
	t.m.Store(&m)
	t.g.rebuild()
}

func (t *tokenTable) Apply(rev int64, changes []catalog.Change) {
	m := maps.Clone(*t.m.Load())
	for _, ch := range changes {
		if ch.Value == nil {
			delete(m, ch.ID)
		} else {
			m[ch.ID] = ch.Value.(*Token)
		}
	}
	t.m.Store(&m)
	t.g.rebuild()
}

func (t *tokenTable) Record(id string) (any, int64, bool) {
	tok, ok := (*t.m.Load())[id]
	if !ok {
		return nil, 0, false
	}
	return tok, tok.Revision, true
}

type policyTable struct {
	g *Guard
	m atomic.Pointer[map[string]*Policy]
}

var _ catalog.Table = (*policyTable)(nil)

func (t *policyTable) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	p, err := decodePolicy(rec.Value, rec.Revision)
	if err != nil {
		return nil, policiesGroup, err
	}
	if p.Name != rec.Key {
		return nil, policiesGroup, fmt.Errorf("acl: policy record %q holds policy %q", rec.Key, p.Name)
	}
	return p, policiesGroup, nil
}

func (t *policyTable) Adopt(obj any, rev int64) (naming.ServiceKey, error) {
	p, ok := obj.(*Policy)
	if !ok {
		return policiesGroup, fmt.Errorf("acl: policy record carries a %T", obj)
	}
	p.Revision = rev
	return policiesGroup, nil
}

func (t *policyTable) Group(id string) (naming.ServiceKey, bool) {
	_, ok := (*t.m.Load())[id]
	return policiesGroup, ok
}

func (t *policyTable) Load(rev int64, values []any) {
	m := make(map[string]*Policy, len(values))
	for _, v := range values {
		p := v.(*Policy)
		m[p.Name] = p
	}
	t.m.Store(&m)
	t.g.rebuild()
}

func (t *policyTable) Apply(rev int64, changes []catalog.Change) {
	m := maps.Clone(*t.m.Load())
	for _, ch := range changes {
		if ch.Value == nil {
			delete(m, ch.ID)
		} else {
			m[ch.ID] = ch.Value.(*Policy)
		}
	}
	t.m.Store(&m)
	t.g.rebuild()
}

func (t *policyTable) Record(id string) (any, int64, bool) {
	p, ok := (*t.m.Load())[id]
	if !ok {
		return nil, 0, false
	}
	return p, p.Revision, true
}
