package secret

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/store"
)

// group is the catalog group of every secret: a listing blocks on any change.
var group = naming.ServiceKey{Name: "secrets"}

// Table is the catalog table of secrets: a map replaced whole at each change
// (secrets are few and change rarely). The catalog's writer calls Load and
// Apply; readers call Get and List from any goroutine.
type Table struct {
	m    atomic.Pointer[map[string]*Secret]
	keys *seal.Keyring // opens stored keys; its sealing key seals new ones
}

var _ catalog.Table = (*Table)(nil)

// NewTable returns an empty table whose records' private keys are stored
// plain (and that refuses sealed ones).
func NewTable() *Table { return NewSealedTable(nil) }

// NewSealedTable returns an empty table that opens stored private keys
// with keys and seals them with its sealing key (docs/security.md,
// "Encryption at rest"). A record sealed with a key keys lacks fails to
// decode, so the catalog's load fails naming it.
func NewSealedTable(keys *seal.Keyring) *Table {
	t := &Table{keys: keys}
	m := map[string]*Secret{}
	t.m.Store(&m)
	return t
}

// Keys is the keyring the table seals and opens with (nil: none).
func (t *Table) Keys() *seal.Keyring { return t.keys }

func (t *Table) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	s, err := decode(rec.Value, rec.Revision, t.keys)
	if err != nil {
		return nil, group, err
	}
	if s.ID() != rec.Key {
		return nil, group, fmt.Errorf("secret: record %q holds secret %q", rec.Key, s.ID())
	}
	return s, group, nil
}

func (t *Table) Adopt(obj any, rev int64) (naming.ServiceKey, error) {
	s, ok := obj.(*Secret)
	if !ok {
		return group, fmt.Errorf("secret: record carries a %T", obj)
	}
	s.Revision = rev
	return group, nil
}

func (t *Table) Group(id string) (naming.ServiceKey, bool) {
	_, ok := (*t.m.Load())[id]
	return group, ok
}

func (t *Table) Load(rev int64, values []any) {
	m := make(map[string]*Secret, len(values))
	for _, v := range values {
		s := v.(*Secret)
		m[s.ID()] = s
	}
	t.m.Store(&m)
}

func (t *Table) Apply(rev int64, changes []catalog.Change) {
	m := maps.Clone(*t.m.Load())
	for _, ch := range changes {
		if ch.Value == nil {
			delete(m, ch.ID)
		} else {
			m[ch.ID] = ch.Value.(*Secret)
		}
	}
	t.m.Store(&m)
}

func (t *Table) Record(id string) (any, int64, bool) {
	s, ok := (*t.m.Load())[id]
	if !ok {
		return nil, 0, false
	}
	return s, s.Revision, true
}

// Get returns secret namespace/name, or nil.
func (t *Table) Get(namespace, name string) *Secret {
	return (*t.m.Load())[namespace+"/"+name]
}

// List returns the secrets of namespace ("" for every one), by namespace
// then name.
func (t *Table) List(namespace string) []*Secret {
	var out []*Secret
	for _, s := range *t.m.Load() {
		if namespace == "" || s.Namespace == namespace {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *Secret) int { return strings.Compare(a.ID(), b.ID()) })
	return out
}
