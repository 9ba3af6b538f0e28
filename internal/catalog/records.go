package catalog

import (
	"fmt"
	"maps"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Blob is a record of a kind with no structure the catalog knows: its key,
// its stored bytes and the revision of its last put.
type Blob struct {
	Key      string
	Value    []byte
	Revision int64
}

// Records is the table of a kind of few, small, opaque records that need
// no index: the System kind's one-off server records (the ACL bootstrap
// marker, ...). Each record is its own group. Every catalog has one for
// store.System, so any part may write a system record (with a *Blob as
// the op's Object) and every server of a cluster can apply it.
type Records struct {
	m atomic.Pointer[map[string]*Blob]
}

// NewRecords returns an empty table.
func NewRecords() *Records {
	t := &Records{}
	t.m.Store(&map[string]*Blob{})
	return t
}

var _ Table = (*Records)(nil)

// Decode implements Table.
func (t *Records) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	return &Blob{Key: rec.Key, Value: append([]byte(nil), rec.Value...), Revision: rec.Revision}, naming.ServiceKey{Name: rec.Key}, nil
}

// Adopt implements Table: the writer's object is a *Blob.
func (t *Records) Adopt(obj any, rev int64) (naming.ServiceKey, error) {
	b, ok := obj.(*Blob)
	if !ok {
		return naming.ServiceKey{}, fmt.Errorf("catalog: a record's object must be a *Blob, not %T", obj)
	}
	b.Revision = rev
	return naming.ServiceKey{Name: b.Key}, nil
}

// Group implements Table.
func (t *Records) Group(id string) (naming.ServiceKey, bool) {
	_, ok := (*t.m.Load())[id]
	return naming.ServiceKey{Name: id}, ok
}

// Load implements Table.
func (t *Records) Load(rev int64, values []any) {
	m := make(map[string]*Blob, len(values))
	for _, v := range values {
		b := v.(*Blob)
		m[b.Key] = b
	}
	t.m.Store(&m)
}

// Apply implements Table.
func (t *Records) Apply(rev int64, changes []Change) {
	m := maps.Clone(*t.m.Load())
	for _, ch := range changes {
		if ch.Value == nil {
			delete(m, ch.ID)
			continue
		}
		m[ch.ID] = ch.Value.(*Blob)
	}
	t.m.Store(&m)
}

// Record implements Table: the *Blob and its revision.
func (t *Records) Record(id string) (any, int64, bool) {
	b, ok := (*t.m.Load())[id]
	if !ok {
		return nil, 0, false
	}
	return b, b.Revision, true
}
