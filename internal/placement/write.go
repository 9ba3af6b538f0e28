package placement

import (
	"fmt"
	"slices"
	"sync"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/store"
)

// The appliers of the scheduler's requests (commit.Write). The registry's
// committer plans every request of a commit batch in order; the first of
// them that is the scheduler's opens one Txn, kept in the Scheduler, that
// every later one of the same batch reuses, so a request decides seeing
// the tentative placements of the requests before it and two requests of
// a batch never reserve the same capacity. Each request's share of the
// Txn's ops becomes its store transaction: a new placement is a put on
// condition that the key is absent (checked by the store at commit, so two
// servers never place one workload twice), everything else a plain put or
// delete. Once the store commit returns, Finish aborts the Txn; the
// committed records then reach the scheduler through the store's stream
// and Table.Apply, exactly as another server's would.

// batch is the Txn of the commit batch being planned. The committer's Plans
// and Finishes run on one goroutine; a commit.Engine.DryRun plans on another and
// has its own Tx, so it waits in Begin for the writer lock until the
// committer's batch is finished, and the other way round.
type batch struct {
	mu    sync.Mutex // guards owner and txn; never held while waiting for the writer lock
	owner *commit.Tx
	txn   *Txn
}

// batchTxn returns the Txn of tx's batch, beginning it (and waiting for the
// writer lock) on the batch's first scheduler request.
func (s *Scheduler) batchTxn(tx *commit.Tx) *Txn {
	b := &s.batch
	b.mu.Lock()
	if b.owner == tx && b.txn != nil {
		t := b.txn
		b.mu.Unlock()
		return t
	}
	b.mu.Unlock()
	t := s.Begin()
	b.mu.Lock()
	b.owner, b.txn = tx, t
	b.mu.Unlock()
	return t
}

// soleTxn is batchTxn for a write that, on a server of a cluster, must be
// the batch's only scheduler write: an earlier one may fail its
// conditions at commit (its node claim), and what this one would decide
// rests on that one's tentative state, which the registry cannot see. It
// reports false, and the registry carries the write to the next batch,
// when an earlier write of the batch planned anything.
func (s *Scheduler) soleTxn(tx *commit.Tx) (*Txn, bool) {
	t := s.batchTxn(tx)
	if tx.Shared() && len(t.Ops()) > 0 {
		tx.Depend()
		return nil, false
	}
	return t, true
}

// finishBatch aborts tx's batch Txn, if it still has one.
func (s *Scheduler) finishBatch(tx *commit.Tx) {
	if tx == nil {
		return
	}
	b := &s.batch
	b.mu.Lock()
	if b.owner != tx || b.txn == nil {
		b.mu.Unlock()
		return
	}
	t := b.txn
	b.owner, b.txn = nil, nil
	b.mu.Unlock()
	t.Abort()
}

// stage turns ops, the share of the batch Txn's ops one request made, into
// that request's store ops.
func stage(tx *commit.Tx, ops []Op) {
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Kind == KindNodes && op.Delete && tx.Shared():
			// Another server may have placed onto it since (a placement
			// claims its node): the delete then conflicts and is planned
			// again, releasing that placement too.
			_, rev := tx.Get(store.Nodes, op.Key)
			tx.DeleteIf(store.Nodes, op.Key, rev)
		case op.Kind == KindNodes && op.Delete:
			tx.Delete(store.Nodes, op.Key)
		case op.Kind == KindPlacements && op.Delete:
			tx.Delete(store.Placements, op.Key)
		case op.Node != nil:
			n := op.Node
			tx.Put(store.Nodes, op.Key, tx.Encode(func(b []byte) []byte { b, _ = n.AppendBinary(b); return b }), n)
		case op.Placement != nil:
			p := op.Placement
			tx.PutIf(store.Placements, op.Key, tx.Encode(func(b []byte) []byte { b, _ = p.AppendBinary(b); return b }), p, 0)
		}
	}
}

// PlacedError is the error of a PlaceWrite naming a workload that is
// already placed (HTTP 409). It wraps ErrConflict.
type PlacedError struct {
	Index int    // the workload's position in the request
	Key   Key    // its namespace/name
	Node  string // the node it is placed on
}

func (e *PlacedError) Error() string {
	return fmt.Sprintf("placement: %s is already placed on node %s", e.Key, e.Node)
}

func (e *PlacedError) Unwrap() error { return ErrConflict }

// PlaceWrite places Workloads in order, each seeing the ones before it, and
// reserves their resources durably: a commit.Write. A workload that is
// already placed fails the whole request with a *PlacedError and places
// nothing; one that fits nowhere is answered as unschedulable.
type PlaceWrite struct {
	Scheduler *Scheduler
	Workloads []*Workload

	Results []Result // filled by Plan, in request order
	tx      *commit.Tx
}

// Plan implements commit.Write.
func (w *PlaceWrite) Plan(tx *commit.Tx) error {
	w.tx = tx
	t, ok := w.Scheduler.soleTxn(tx)
	if !ok {
		return nil
	}
	for i, wl := range w.Workloads {
		// The batch's view: committed placements and the batch's own.
		if v, _ := tx.Get(store.Placements, wl.Key.String()); v != nil {
			return &PlacedError{Index: i, Key: wl.Key, Node: v.(*Placement).Node}
		}
	}
	mark := len(t.Ops())
	res, err := t.Place(w.Workloads)
	if err != nil {
		return err // Place changed nothing
	}
	w.Results = res
	ops := t.Ops()[mark:]
	stage(tx, ops)
	if tx.Shared() {
		claimNodes(tx, ops)
	}
	tx.Answer(tx.Revision())
	return nil
}

// claimNodes rewrites, unchanged, the node of every placement in ops on
// condition that it is still the version this server decided on. Servers
// of a cluster each decide on their own catalog; two that place onto one
// node at once would both see its free capacity, and the placement
// records alone (keyed by pod) never conflict. The node's revision does:
// the second commit fails and is planned again on the first one's state
// (commit.Engine.SubmitChecked). A node deleted or replaced meanwhile conflicts
// the same way.
func claimNodes(tx *commit.Tx, ops []Op) {
	claimed := map[string]bool{}
	for i := range ops {
		p := ops[i].Placement
		if p == nil || claimed[p.Node] {
			continue
		}
		claimed[p.Node] = true
		v, rev := tx.Get(store.Nodes, p.Node)
		if v == nil {
			continue // Place checked it exists; a store condition covers the rest
		}
		n := *v.(*Node) // the catalog adopts the copy (sets its revision)
		tx.PutIf(store.Nodes, n.Name, tx.Encode(func(b []byte) []byte { b, _ = n.AppendBinary(b); return b }), &n, rev)
	}
}

// Finish implements commit.Finisher.
func (w *PlaceWrite) Finish() { w.Scheduler.finishBatch(w.tx) }

// NodesWrite creates or replaces Nodes atomically: a commit.Write. A node
// stored with exactly these fields is left as it is (no revision, no
// write); a replaced node keeps its place in the tie-break order (Seq) and
// its placements.
type NodesWrite struct {
	Scheduler *Scheduler
	Nodes     []*Node

	Changed []string // filled by Plan: the names written
	Created []string // filled by Plan: those of Changed that were not stored before
	tx      *commit.Tx
}

// Plan implements commit.Write.
func (w *NodesWrite) Plan(tx *commit.Tx) error {
	w.tx = tx
	t, ok := w.Scheduler.soleTxn(tx)
	if !ok {
		return nil
	}
	w.Changed, w.Created = w.Changed[:0], w.Created[:0]
	var changed []*Node
	for _, n := range w.Nodes {
		v, _ := tx.Get(store.Nodes, n.Name)
		if v != nil && sameNode(v.(*Node), n) {
			continue
		}
		changed = append(changed, n)
		w.Changed = append(w.Changed, n.Name)
		if v == nil && !slices.Contains(w.Created, n.Name) {
			w.Created = append(w.Created, n.Name)
		}
	}
	tx.Answer(tx.Revision())
	if len(changed) == 0 {
		return nil
	}
	mark := len(t.Ops())
	t.UpsertNodes(changed)
	stage(tx, t.Ops()[mark:])
	return nil
}

// Finish implements commit.Finisher.
func (w *NodesWrite) Finish() { w.Scheduler.finishBatch(w.tx) }

// sameNode reports whether stored cur already holds what n says.
func sameNode(cur, n *Node) bool {
	c := *n
	c.Seq, c.Revision = cur.Seq, cur.Revision
	a, _ := cur.AppendBinary(nil)
	b, _ := c.AppendBinary(nil)
	return string(a) == string(b)
}

// DeleteNodeWrite deletes a node and releases its placements: a
// commit.Write. ErrNotFound if there is no such node.
type DeleteNodeWrite struct {
	Scheduler *Scheduler
	Name      string

	Released []Key // filled by Plan, sorted
	tx       *commit.Tx
}

// Plan implements commit.Write.
func (w *DeleteNodeWrite) Plan(tx *commit.Tx) error {
	w.tx = tx
	t, ok := w.Scheduler.soleTxn(tx)
	if !ok {
		return nil
	}
	mark := len(t.Ops())
	released, err := t.DeleteNode(w.Name)
	if err != nil {
		return err
	}
	w.Released = released
	stage(tx, t.Ops()[mark:])
	return nil
}

// Finish implements commit.Finisher.
func (w *DeleteNodeWrite) Finish() { w.Scheduler.finishBatch(w.tx) }

// DeletePlacementWrite frees a placement's resources: a commit.Write.
// ErrNotFound if it is not placed.
type DeletePlacementWrite struct {
	Scheduler *Scheduler
	Key       Key

	Node string // filled by Plan: the node it was on
	tx   *commit.Tx
}

// Plan implements commit.Write.
func (w *DeletePlacementWrite) Plan(tx *commit.Tx) error {
	w.tx = tx
	t, ok := w.Scheduler.soleTxn(tx)
	if !ok {
		return nil
	}
	if v, _ := tx.Get(store.Placements, w.Key.String()); v != nil {
		w.Node = v.(*Placement).Node
	}
	mark := len(t.Ops())
	if err := t.DeletePlacement(w.Key); err != nil {
		return err
	}
	stage(tx, t.Ops()[mark:])
	return nil
}

// Finish implements commit.Finisher.
func (w *DeletePlacementWrite) Finish() { w.Scheduler.finishBatch(w.tx) }
