package placement

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// ErrConflict is returned when a workload is already placed (HTTP 409).
var ErrConflict = errors.New("placement: already placed")

// ErrNotFound is returned for a node or placement that does not exist
// (HTTP 404).
var ErrNotFound = errors.New("placement: not found")

// Result is the outcome for one workload: the node it is bound to, or
// kube-scheduler's message saying why no node fits.
type Result struct {
	Key
	Node          string `json:"node,omitempty"`
	Unschedulable string `json:"unschedulable,omitempty"`
}

// Op is one durable change a Txn made: a put of a Node or Placement
// record, or a delete of Key in Kind.
type Op struct {
	Kind      string // KindNodes or KindPlacements
	Key       string // node name, or namespace/name
	Delete    bool
	Node      *Node      // put of kind nodes
	Placement *Placement // put of kind placements
}

// Value encodes the record a put stores (nil for a delete).
func (o *Op) Value() []byte {
	switch {
	case o.Delete:
		return nil
	case o.Node != nil:
		b, _ := o.Node.MarshalBinary()
		return b
	case o.Placement != nil:
		b, _ := o.Placement.MarshalBinary()
		return b
	}
	return nil
}

// Scheduler owns nodes and placements in memory and decides where
// workloads go. See the package documentation for its concurrency.
type Scheduler struct {
	mu   sync.Mutex // the writer lock: held by one Txn at a time
	e    *engine    // guarded by mu
	v    view
	log  *slog.Logger
	pool *pool

	batch   batch   // the registry's commit batch being planned (write.go)
	loading []*Node // nodes loaded by the catalog, until its placements are (table.go)
}

// Config configures a Scheduler; the zero value is valid.
type Config struct {
	Log *slog.Logger // nil: discard
	// Workers is how many goroutines (the writer included) split the
	// per-node loops of one decision on large clusters; 0 or 1: the writer
	// alone, and the Scheduler starts no goroutine.
	Workers int
}

// New returns an empty scheduler. Call Close when done with it.
func New(cfg Config) *Scheduler {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{e: newEngine(), log: log}
	if cfg.Workers > 1 {
		s.pool = newPool(cfg.Workers)
		s.e.pool = s.pool
	}
	s.v.reset(s.e, 0, nil)
	return s
}

// Close stops the worker goroutines. No Txn may be open or begun after.
func (s *Scheduler) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pool.close()
	s.pool = nil
	s.e.pool = nil
}

// Txn is a batch of changes made under the writer lock. Its decisions see
// its earlier changes; other readers see none of them until Commit. Every
// Txn must end with Commit or Abort.
type Txn struct {
	s       *Scheduler
	undo    []func()
	ops     []Op
	touched map[uint32]struct{}
	nodes   bool // the node set or a node's labels changed
	rebuild bool // a node arrived out of Seq order: rebuild at commit
	done    bool
}

// Begin takes the writer lock and starts a transaction. It blocks while
// another Txn is open.
func (s *Scheduler) Begin() *Txn {
	s.mu.Lock()
	return &Txn{s: s, touched: map[uint32]struct{}{}}
}

func (t *Txn) check() {
	if t.done {
		panic("placement: Txn used after Commit or Abort")
	}
}

// Place decides a node for each workload, in order, each seeing the ones
// before it, and reserves it. A workload already placed (or named twice)
// fails the whole call with ErrConflict and changes nothing.
func (t *Txn) Place(ws []*Workload) ([]Result, error) {
	t.check()
	e := t.s.e
	seen := make(map[Key]struct{}, len(ws))
	for _, w := range ws {
		if _, ok := e.placements[w.Key]; ok {
			return nil, fmt.Errorf("%w: %s", ErrConflict, w.Key)
		}
		if _, ok := seen[w.Key]; ok {
			return nil, fmt.Errorf("%w: %s named twice", ErrConflict, w.Key)
		}
		seen[w.Key] = struct{}{}
	}
	out := make([]Result, len(ws))
	for i, w := range ws {
		s, msg := e.decide(w)
		if s < 0 {
			out[i] = Result{Key: w.Key, Unschedulable: msg}
			continue
		}
		slot := uint32(s)
		p := w.Placement(e.nodes[slot].Name)
		e.addPlacement(p, slot)
		t.undo = append(t.undo, func() { e.removePlacement(p, slot) })
		t.ops = append(t.ops, Op{Kind: KindPlacements, Key: p.Key.String(), Placement: p})
		t.touched[slot] = struct{}{}
		out[i] = Result{Key: w.Key, Node: p.Node}
	}
	return out, nil
}

// UpsertNodes creates or replaces nodes (a replaced node keeps its Seq and
// its placements, even if they no longer fit, as Kubernetes does). It
// returns the records stored, with Seq set.
func (t *Txn) UpsertNodes(nodes []*Node) []*Node {
	t.check()
	e := t.s.e
	out := make([]*Node, len(nodes))
	for i, n := range nodes {
		c := *n
		if slot, ok := e.byName[n.Name]; ok {
			old := e.nodes[slot]
			c.Seq = old.Seq
			e.setNode(slot, &c)
			t.undo = append(t.undo, func() { e.setNode(slot, old) })
			t.touched[slot] = struct{}{}
		} else {
			c.Seq = e.nextSeq
			t.addNode(&c)
		}
		t.nodes = true
		out[i] = &c
		t.ops = append(t.ops, Op{Kind: KindNodes, Key: c.Name, Node: &c})
	}
	return out
}

func (t *Txn) addNode(n *Node) {
	e := t.s.e
	next := e.nextSeq
	slot := e.addNode(n)
	t.undo = append(t.undo, func() {
		e.removeNode(slot)
		e.dropLastSlot(slot)
		e.nextSeq = next
	})
	t.touched[slot] = struct{}{}
}

// DeleteNode deletes a node and releases its placements, which it returns
// sorted. ErrNotFound if there is no such node.
func (t *Txn) DeleteNode(name string) ([]Key, error) {
	t.check()
	e := t.s.e
	slot, ok := e.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: node %s", ErrNotFound, name)
	}
	ps := append([]*Placement(nil), e.onNode[slot]...)
	keys := make([]Key, len(ps))
	for i, p := range ps {
		keys[i] = p.Key
		t.removePlacement(p, slot)
	}
	n := e.removeNode(slot)
	t.undo = append(t.undo, func() { e.setNode(slot, n) })
	t.touched[slot] = struct{}{}
	t.nodes = true
	t.ops = append(t.ops, Op{Kind: KindNodes, Key: name, Delete: true})
	sortKeys(keys)
	return keys, nil
}

func (t *Txn) removePlacement(p *Placement, slot uint32) {
	e := t.s.e
	e.removePlacement(p, slot)
	t.undo = append(t.undo, func() { e.addPlacement(p, slot) })
	t.touched[slot] = struct{}{}
	t.ops = append(t.ops, Op{Kind: KindPlacements, Key: p.Key.String(), Delete: true})
}

// DeletePlacement frees a placement's resources. ErrNotFound if it is not
// placed.
func (t *Txn) DeletePlacement(k Key) error {
	t.check()
	e := t.s.e
	p, ok := e.placements[k]
	if !ok {
		return fmt.Errorf("%w: placement %s", ErrNotFound, k)
	}
	t.removePlacement(p, e.byName[p.Node])
	return nil
}

// Ops returns the durable changes made so far, in order: persist them
// (one transaction, with Op.Value as the record) before Commit.
func (t *Txn) Ops() []Op { return t.ops }

// Commit makes the changes visible to readers at revision rev and releases
// the writer lock. Call it only after Ops are durable.
func (t *Txn) Commit(rev int64) {
	t.check()
	t.done = true
	s := t.s
	if t.rebuild || s.e.needsCompaction() {
		s.rebuild(rev)
	} else {
		s.v.apply(s.e, rev, t.ops, t.touched, t.nodes)
	}
	s.mu.Unlock()
}

// Abort undoes every change and releases the writer lock. After Commit
// it does nothing, so `defer tx.Abort()` is safe.
func (t *Txn) Abort() {
	if t.done {
		return
	}
	t.done = true
	e := t.s.e
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	if t.nodes {
		// The undo log put the labels back; indexes derived from them are
		// rebuilt on demand.
		clear(e.topo)
	}
	t.s.mu.Unlock()
}

// Apply makes committed records the truth without deciding anything: the
// path for changes another server made (read from the store's change
// stream). A placement on an unknown node is an error and nothing is
// applied.
func (s *Scheduler) Apply(rev int64, ops []Op) error {
	t := s.Begin()
	defer t.Abort()
	e := s.e
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Kind == KindNodes && op.Delete:
			if _, err := t.DeleteNode(op.Key); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		case op.Kind == KindNodes:
			n := op.Node
			if slot, ok := e.byName[n.Name]; ok {
				old := e.nodes[slot]
				e.setNode(slot, n)
				t.undo = append(t.undo, func() { e.setNode(slot, old) })
				t.touched[slot] = struct{}{}
			} else {
				if n.Seq < e.nextSeq {
					t.rebuild = true
				}
				t.addNode(n)
			}
			t.nodes = true
			t.ops = append(t.ops, *op)
		case op.Kind == KindPlacements && op.Delete:
			var k Key
			if err := k.parse(op.Key); err != nil {
				return err
			}
			if err := t.DeletePlacement(k); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		case op.Kind == KindPlacements:
			p := op.Placement
			slot, ok := e.byName[p.Node]
			if !ok {
				return fmt.Errorf("%w: node %s of placement %s", ErrNotFound, p.Node, p.Key)
			}
			if old, ok := e.placements[p.Key]; ok {
				t.removePlacement(old, e.byName[old.Node])
			}
			e.addPlacement(p, slot)
			t.undo = append(t.undo, func() { e.removePlacement(p, slot) })
			t.touched[slot] = struct{}{}
			t.ops = append(t.ops, *op)
		default:
			return fmt.Errorf("placement: unknown record kind %q", op.Kind)
		}
	}
	t.Commit(rev)
	return nil
}

func (k *Key) parse(s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			k.Namespace, k.Name = s[:i], s[i+1:]
			return nil
		}
	}
	return fmt.Errorf("%w: placement key %q is not namespace/name", ErrCorrupt, s)
}

// Place is Begin, Txn.Place, persist and Commit in one call: persist gets
// the ops to make durable and returns the revision they were stored at; if
// it fails nothing is placed.
func (s *Scheduler) Place(ws []*Workload, persist func([]Op) (int64, error)) ([]Result, int64, error) {
	t := s.Begin()
	defer t.Abort()
	res, err := t.Place(ws)
	if err != nil {
		return nil, 0, err
	}
	rev := s.Revision()
	if len(t.ops) > 0 {
		if rev, err = persist(t.ops); err != nil {
			return nil, 0, err
		}
	}
	t.Commit(rev)
	return res, rev, nil
}
