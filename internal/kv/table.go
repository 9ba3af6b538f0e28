package kv

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/btree"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Table is the catalog table of KV entries: a B-tree by namespace/key,
// copied on write (a clone shares every node until it changes one), so a
// write costs O(log n) and readers walk an immutable version without
// waiting. The catalog's writer calls Load and Apply; readers call Get,
// List and Revision from any goroutine.
//
// Each entry is a catalog group of its own (namespace, key), so a blocking
// read of one key waits on that key alone (catalog.WaitGroup).
type Table struct {
	v atomic.Pointer[version]

	// mu guards the histories (history.go): written by Apply, read by
	// History.
	mu      sync.Mutex
	hist    map[string]*history
	deleted []deletedKey // oldest first
	// superseded is every older version kept, oldest first, and their
	// cost: the global bound (HistoryTotalBytes).
	superseded queue
}

type version struct {
	tree *btree.BTreeG[*Entry]
	// rev is the revision of the table's last change (a delete included),
	// or of the load: Consul's index of an answer about an absent key.
	rev int64
}

func less(a, b *Entry) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Key < b.Key
}

var _ catalog.Elider = (*Table)(nil)

// NewTable returns an empty table.
func NewTable() *Table {
	t := &Table{hist: map[string]*history{}}
	t.v.Store(&version{tree: btree.NewG(32, less)})
	return t
}

// Group is the catalog group of key in namespace ns.
func Group(ns, key string) naming.ServiceKey { return naming.ServiceKey{Namespace: ns, Name: key} }

// ElideInLog implements catalog.Elider: the change log keeps no values,
// which are up to 512 KiB each; the KV endpoints read only the keys
// changed.
func (t *Table) ElideInLog() {}

func (t *Table) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	e, err := decode(rec.Key, rec.Revision, rec.Value)
	if err != nil {
		return nil, naming.ServiceKey{}, err
	}
	return e, Group(e.Namespace, e.Key), nil
}

func (t *Table) Adopt(obj any, rev int64) (naming.ServiceKey, error) {
	e, ok := obj.(*Entry)
	if !ok {
		return naming.ServiceKey{}, fmt.Errorf("kv: record carries a %T", obj)
	}
	e.ModifyIndex = rev
	e.CreateIndex = e.created
	if e.created == 0 {
		e.CreateIndex = rev
	}
	return Group(e.Namespace, e.Key), nil
}

func (t *Table) Group(id string) (naming.ServiceKey, bool) {
	ns, key, _ := strings.Cut(id, "/")
	_, ok := t.v.Load().tree.Get(&Entry{Namespace: ns, Key: key})
	return Group(ns, key), ok
}

func (t *Table) Load(rev int64, values []any) {
	tree := btree.NewG(32, less)
	for _, v := range values {
		tree.ReplaceOrInsert(v.(*Entry))
	}
	t.v.Store(&version{tree: tree, rev: rev})
	// What happened before the load is not known: start again.
	t.mu.Lock()
	t.hist, t.deleted = map[string]*history{}, nil
	t.superseded = queue{}
	t.mu.Unlock()
}

func (t *Table) Apply(rev int64, changes []catalog.Change) {
	old := t.v.Load()
	tree := old.tree.Clone()
	last := old.rev
	t.mu.Lock()
	for _, ch := range changes {
		var e *Entry
		if ch.Value == nil {
			tree.Delete(&Entry{Namespace: ch.Key.Namespace, Key: ch.Key.Name})
		} else {
			e = ch.Value.(*Entry)
			tree.ReplaceOrInsert(e)
		}
		if !internalNS(ch.Key.Namespace) {
			t.record(ch.ID, Version{Revision: ch.Revision, Committed: ch.Committed, Entry: e})
		}
		last = max(last, ch.Revision)
	}
	t.mu.Unlock()
	t.v.Store(&version{tree: tree, rev: last})
}

func (t *Table) Record(id string) (any, int64, bool) {
	ns, key, _ := strings.Cut(id, "/")
	e, ok := t.v.Load().tree.Get(&Entry{Namespace: ns, Key: key})
	if !ok {
		return nil, 0, false
	}
	return e, e.ModifyIndex, true
}

// Get returns key of namespace ns, or nil.
func (t *Table) Get(ns, key string) *Entry {
	e, _ := t.v.Load().tree.Get(&Entry{Namespace: ns, Key: key})
	return e
}

// Revision is the revision of the table's last change, deletes included.
func (t *Table) Revision() int64 { return t.v.Load().rev }

// List calls fn for each entry of namespace ns whose key starts with
// prefix, in key order, until fn returns false. It walks one version.
func (t *Table) List(ns, prefix string, fn func(*Entry) bool) {
	t.v.Load().tree.AscendGreaterOrEqual(&Entry{Namespace: ns, Key: prefix}, func(e *Entry) bool {
		if e.Namespace != ns || !strings.HasPrefix(e.Key, prefix) {
			return false
		}
		return fn(e)
	})
}

// Len is the number of entries of every namespace.
func (t *Table) Len() int { return t.v.Load().tree.Len() }
