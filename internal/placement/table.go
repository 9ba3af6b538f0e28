package placement

import (
	"fmt"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// The scheduler is the catalog table of both its kinds (docs/registry.md,
// "Adding a record kind"): Tables returns one adapter per kind over the
// same Scheduler. The write engine's follower is then the only path by which
// records become the scheduler's committed state, whoever wrote them: this
// server's writes (write.go) decide in a Txn that is aborted once the store
// commit returns, and come back through Apply like another server's.

// CatalogGroup is the catalog group of every node and placement change.
var CatalogGroup = naming.ServiceKey{}

// Table is the catalog table of one of the scheduler's kinds, store.Nodes
// or store.Placements. The catalog's writer (the write engine's follower)
// calls Decode, Adopt, Group, Load and Apply; Record is called by
// planners on any goroutine and reads the readers' view only.
type Table struct {
	s    *Scheduler
	kind store.Kind
}

var _ catalog.Table = (*Table)(nil)

// Tables returns the catalog tables of store.Nodes and store.Placements,
// both over s: register them with commit.Options.Tables.
func (s *Scheduler) Tables() map[store.Kind]catalog.Table {
	return map[store.Kind]catalog.Table{
		store.Nodes:      &Table{s: s, kind: store.Nodes},
		store.Placements: &Table{s: s, kind: store.Placements},
	}
}

// Scheduler returns the scheduler the table is part of.
func (t *Table) Scheduler() *Scheduler { return t.s }

// Of returns the scheduler whose tables c holds, or nil if it has none.
func Of(c *catalog.Catalog) *Scheduler {
	if t, ok := c.Table(store.Placements).(*Table); ok {
		return t.s
	}
	return nil
}

// Decode implements catalog.Table: a *Node or a *Placement, with the
// record's revision.
func (t *Table) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	if t.kind == store.Nodes {
		n := new(Node)
		if err := n.UnmarshalBinary(rec.Value); err != nil {
			return nil, CatalogGroup, err
		}
		if n.Name != rec.Key {
			return nil, CatalogGroup, fmt.Errorf("%w: node record %q holds node %q", ErrCorrupt, rec.Key, n.Name)
		}
		n.Revision = rec.Revision
		return n, CatalogGroup, nil
	}
	p := new(Placement)
	if err := p.UnmarshalBinary(rec.Value); err != nil {
		return nil, CatalogGroup, err
	}
	if p.Key.String() != rec.Key {
		return nil, CatalogGroup, fmt.Errorf("%w: placement record %q holds placement %s", ErrCorrupt, rec.Key, p.Key)
	}
	p.Revision = rec.Revision
	return p, CatalogGroup, nil
}

// Adopt implements catalog.Table: the writer's *Node or *Placement (the
// one its Txn decided with) gets its revision.
func (t *Table) Adopt(obj any, rev int64) (naming.ServiceKey, error) {
	switch o := obj.(type) {
	case *Node:
		if t.kind == store.Nodes {
			o.Revision = rev
			return CatalogGroup, nil
		}
	case *Placement:
		if t.kind == store.Placements {
			o.Revision = rev
			return CatalogGroup, nil
		}
	}
	return CatalogGroup, fmt.Errorf("placement: a %v record carries a %T", t.kind, obj)
}

// Group implements catalog.Table: whether the record exists.
func (t *Table) Group(id string) (naming.ServiceKey, bool) {
	_, _, ok := t.Record(id)
	return CatalogGroup, ok
}

// Record implements catalog.Table: the committed *Node or *Placement and
// its revision. It never waits for a decision.
func (t *Table) Record(id string) (any, int64, bool) {
	if t.kind == store.Nodes {
		info, _, ok := t.s.Node(id)
		if !ok {
			return nil, 0, false
		}
		return info.Node, info.Node.Revision, true
	}
	var k Key
	if k.parse(id) != nil {
		return nil, 0, false
	}
	p, _, ok := t.s.Placement(k)
	if !ok {
		return nil, 0, false
	}
	return p, p.Revision, true
}

// Load implements catalog.Table. The catalog loads nodes before
// placements (store.Kinds order): the nodes table keeps its values until
// the placements table builds the whole state in one Scheduler.Load.
func (t *Table) Load(rev int64, values []any) {
	s := t.s
	if t.kind == store.Nodes {
		s.loading = make([]*Node, len(values))
		for i, v := range values {
			s.loading[i] = v.(*Node)
		}
		return
	}
	nodes := s.loading
	s.loading = nil
	ps := make([]*Placement, len(values))
	for i, v := range values {
		ps[i] = v.(*Placement)
	}
	err := s.Load(rev, nodes, ps)
	if err == nil {
		return
	}
	// Only a placement on a missing node can fail a load of records the
	// store keyed uniquely (two servers of a cluster racing a node delete
	// and a placement on it). Keep the rest rather than nothing.
	s.log.Error("placement: the stored state is inconsistent; loading without the placements of missing nodes", "revision", rev, "err", err)
	names := make(map[string]struct{}, len(nodes))
	for _, n := range nodes {
		names[n.Name] = struct{}{}
	}
	kept := ps[:0]
	for _, p := range ps {
		if _, ok := names[p.Node]; ok {
			kept = append(kept, p)
		} else {
			s.log.Error("placement: placement on a missing node not loaded", "placement", p.Key.String(), "node", p.Node)
		}
	}
	if err := s.Load(rev, nodes, kept); err != nil {
		s.log.Error("placement: load failed; the scheduler is empty", "revision", rev, "err", err)
		s.Load(rev, nil, nil)
	}
}

// Apply implements catalog.Table: the committed changes become the
// scheduler's state. A change the scheduler refuses (a placement on a node
// it does not have) is logged and skipped; the others apply.
func (t *Table) Apply(rev int64, changes []catalog.Change) {
	kind := KindNodes
	if t.kind == store.Placements {
		kind = KindPlacements
	}
	ops := make([]Op, len(changes))
	for i, ch := range changes {
		op := Op{Kind: kind, Key: ch.ID}
		switch v := ch.Value.(type) {
		case nil:
			op.Delete = true
		case *Node:
			op.Node = v
		case *Placement:
			op.Placement = v
		}
		ops[i] = op
	}
	err := t.s.Apply(rev, ops)
	if err == nil {
		return
	}
	// Apply changed nothing: apply one change at a time, skipping the bad.
	t.s.log.Error("placement: a committed change cannot be applied; applying the others one by one", "revision", rev, "err", err)
	for i := range ops {
		if err := t.s.Apply(rev, ops[i:i+1]); err != nil {
			t.s.log.Error("placement: committed change skipped", "revision", rev, "kind", kind, "key", ops[i].Key, "err", err)
		}
	}
}
