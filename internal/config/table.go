package config

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Entry is one stored config object: the object, its canonical encoding (the
// record's bytes) and the revision of its last change.
type Entry struct {
	Object   *Object
	Encoded  []byte
	Revision int64
}

// Table is the catalog table of routing config (store.Config records):
// immutable versions of every object for readers, and an Index for the
// warnings an apply answers. Every config change is in one catalog group,
// so a blocking read of config wakes on any config change.
type Table struct {
	c        *catalog.Catalog
	meshRoot string // SetRootNamespace; "": DefaultRootNamespace
	root     atomic.Pointer[tableRoot]

	mu  sync.RWMutex // guards ix; taken alone
	ix  *Index
	rev atomic.Int64 // revision of the last config change
}

type tableRoot struct {
	entries map[Key]*Entry
	keys    []Key // sorted
}

// Group is the catalog group every config change is in.
var CatalogGroup = naming.ServiceKey{}

// NewTable returns an empty table; register it with the write engine
// (commit.Options.Tables[store.Config]) and give it the catalog with
// Attach once the write engine is open.
func NewTable() *Table {
	t := &Table{ix: NewIndex()}
	t.root.Store(&tableRoot{entries: map[Key]*Entry{}})
	return t
}

// SetRootNamespace names the mesh's root namespace (Istio's
// meshConfig.rootNamespace), whose security policies apply mesh-wide. Call
// it before the table is shared; "" is DefaultRootNamespace.
func (t *Table) SetRootNamespace(ns string) { t.meshRoot = ns }

// RootNamespace is the mesh's root namespace.
func (t *Table) RootNamespace() string {
	if t.meshRoot == "" {
		return DefaultRootNamespace
	}
	return t.meshRoot
}

// Attach gives the table its catalog, for blocking reads.
func (t *Table) Attach(c *catalog.Catalog) { t.c = c }

var _ catalog.Table = (*Table)(nil)

// Decode implements catalog.Table.
func (t *Table) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	o, err := DecodeRecord(rec.Value)
	if err != nil {
		return nil, CatalogGroup, err
	}
	if o.Key.String() != rec.Key {
		return nil, CatalogGroup, fmt.Errorf("config: record %q holds %s", rec.Key, o.Key)
	}
	return &Entry{Object: o, Encoded: append([]byte(nil), rec.Value...), Revision: rec.Revision}, CatalogGroup, nil
}

// Adopt implements catalog.Table.
func (t *Table) Adopt(obj any, rev int64) (naming.ServiceKey, error) {
	e, ok := obj.(*Entry)
	if !ok {
		return CatalogGroup, fmt.Errorf("config: record carries a %T", obj)
	}
	e.Revision = rev
	return CatalogGroup, nil
}

// Group implements catalog.Table.
func (t *Table) Group(id string) (naming.ServiceKey, bool) {
	k, err := ParseKey(id)
	if err != nil {
		return CatalogGroup, false
	}
	_, ok := t.root.Load().entries[k]
	return CatalogGroup, ok
}

// Record implements catalog.Table.
func (t *Table) Record(id string) (any, int64, bool) {
	k, err := ParseKey(id)
	if err != nil {
		return nil, 0, false
	}
	e := t.root.Load().entries[k]
	if e == nil {
		return nil, 0, false
	}
	return e, e.Revision, true
}

// Load implements catalog.Table.
func (t *Table) Load(rev int64, values []any) {
	r := &tableRoot{entries: make(map[Key]*Entry, len(values))}
	ix := NewIndex()
	var last int64
	for _, v := range values {
		e := v.(*Entry)
		r.entries[e.Object.Key] = e
		ix.Put(e.Object)
		last = max(last, e.Revision)
	}
	r.keys = slices.SortedFunc(maps.Keys(r.entries), Key.Compare)
	t.mu.Lock()
	t.ix = ix
	t.mu.Unlock()
	t.rev.Store(rev)
	t.root.Store(r)
}

// Apply implements catalog.Table.
func (t *Table) Apply(rev int64, changes []catalog.Change) {
	old := t.root.Load()
	r := &tableRoot{entries: maps.Clone(old.entries), keys: old.keys}
	keysChanged := false
	t.mu.Lock()
	for _, ch := range changes {
		k, err := ParseKey(ch.ID)
		if err != nil {
			continue // Group refused it: never applied
		}
		if e, ok := ch.Value.(*Entry); ok {
			if _, had := r.entries[k]; !had {
				keysChanged = true
			}
			r.entries[k] = e
			t.ix.Put(e.Object)
		} else if _, had := r.entries[k]; had {
			delete(r.entries, k)
			t.ix.Delete(k)
			keysChanged = true
		}
	}
	t.mu.Unlock()
	if keysChanged {
		r.keys = slices.SortedFunc(maps.Keys(r.entries), Key.Compare)
	}
	t.rev.Store(rev)
	t.root.Store(r)
}

// Revision is the revision of the last config change (or of the load).
func (t *Table) Revision() int64 { return t.rev.Load() }

// Get returns the entry under k, or nil.
func (t *Table) Get(k Key) *Entry { return t.root.Load().entries[k] }

// List returns the entries of kind ("" for both) in namespace ns ("" for
// all), in key order, and the config revision they reflect.
func (t *Table) List(kind, ns string) ([]*Entry, int64) {
	rev := t.rev.Load()
	r := t.root.Load()
	out := make([]*Entry, 0, len(r.keys))
	for _, k := range r.keys {
		if (kind == "" || k.Kind == kind) && (ns == "" || k.Namespace == ns) {
			out = append(out, r.entries[k])
		}
	}
	return out, rev
}

// Wait blocks until the config revision is greater than index or ctx ends.
func (t *Table) Wait(ctx context.Context, index int64) {
	if t.c == nil {
		return
	}
	t.c.WaitGroup(ctx, store.Config, CatalogGroup, func() bool { return t.rev.Load() > index })
}

// Warnings says what applying o together with also would leave surprising
// (Index.Warnings), and the subsets of a DestinationRule that select no
// registered instance.
func (t *Table) Warnings(o *Object, also ...*Object) []string {
	t.mu.RLock()
	w := t.ix.Warnings(o, also...)
	t.mu.RUnlock()
	w = append(w, t.securityWarnings(o)...)
	w = append(w, t.bindingWarnings(o, also)...)
	return append(w, t.emptySubsets(o)...)
}

// emptySubsets warns about each subset of DestinationRule o that matches no
// instance registered now (healthy or not): its cluster would have no
// endpoint and the routes to it fall through (docs/controlplane.md). A
// typo in a label, or a label no instance carries, shows here instead of
// as a gateway's 404. Read from the catalog's label index, as the push
// engine reads it. A service with no instances at all gets one warning
// about its host instead (unregisteredHosts), not one per subset.
func (t *Table) emptySubsets(o *Object) []string {
	if o.DestinationRule == nil || t.c == nil {
		return nil
	}
	k, err := ResolveHost(o.DestinationRule.Host, o.Namespace)
	if err != nil {
		return nil
	}
	// The instance kind's table (registry.Instances).
	inst, ok := t.c.Table(store.Instances).(*catalog.Groups[*instance.Instance])
	if !ok {
		return nil
	}
	svc := inst.Lookup(k)
	if svc == nil || svc.Len() == 0 {
		return nil
	}
	var out []string
	for i, s := range o.DestinationRule.Subsets {
		sel, _ := SubsetSelector(o, s.Name)
		if svc.Match(sel, false).Any() {
			continue
		}
		labels := sel.String()
		if labels == "" {
			labels = "none"
		}
		out = append(out, fmt.Sprintf("spec.subsets[%d]: subset %q (labels %s) matches no registered instance of %s: its cluster has no endpoint and routes to it fall through (an instance's version is its label \"version\")", i, s.Name, labels, k))
	}
	return out
}
