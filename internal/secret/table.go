package secret

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// group is the catalog group of every secret: a listing blocks on any change.
var group = naming.ServiceKey{Name: "secrets"}

// Table is the catalog table of secrets: a map replaced whole at each change
// (secrets are few and change rarely). The catalog's writer calls Load and
// Apply; readers call Get and List from any goroutine.
type Table struct {
	m atomic.Pointer[map[string]*Secret]
}

var _ catalog.Table = (*Table)(nil)

// NewTable returns an empty table.
func NewTable() *Table {
	t := &Table{}
	m := map[string]*Secret{}
	t.m.Store(&m)
	return t
}

func (t *Table) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	s, err := Decode(rec.Value, rec.Revision)
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
