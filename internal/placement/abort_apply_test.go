package placement

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/label"
)

// The registry's write path decides in a Txn, aborts it once the store has
// committed, and makes the committed records the truth with Apply (as the
// catalog's follower hands them over: runs of one kind, the writer's own
// objects in process, decoded records from another). These tests hold that
// to what Commit would have left: the same slots, Seqs, tie-break order,
// reservations, counts and listings, and so the same later decisions.

// fingerprint renders everything a decision or a read depends on,
// leaving out caches (scores, matchers) that are rebuilt on demand.
func fingerprint(s *Scheduler) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.e
	var b strings.Builder
	fmt.Fprintf(&b, "slots=%d live=%d nextSeq=%d placements=%d\n", len(e.nodes), e.nlive, e.nextSeq, len(e.placements))
	for slot, n := range e.nodes {
		if n == nil {
			fmt.Fprintf(&b, "%d: -\n", slot)
			continue
		}
		r := e.res[slot]
		var pods []string
		for _, p := range e.onNode[slot] {
			pods = append(pods, p.Key.String())
		}
		slices.Sort(pods)
		var scalars []string
		for _, name := range slices.Sorted(maps.Keys(e.scalars)) {
			c := e.scalars[name]
			if c.alloc[slot] != 0 || c.req[slot] != 0 {
				scalars = append(scalars, fmt.Sprintf("%s=%d/%d", name, c.req[slot], c.alloc[slot]))
			}
		}
		var taints []string
		for _, id := range e.nodeTaints[slot] {
			taints = append(taints, fmt.Sprint(e.taints.list[id].t))
		}
		fmt.Fprintf(&b, "%d: %s seq=%d live=%v unsched=%v labels=%v taints=%v cpu=%d/%d mem=%d/%d eph=%d pods=%d/%d nz=%d,%d %v bucket=%x pods=%v\n",
			slot, n.Name, n.Seq, e.live.Test(uint(slot)), e.unsched.Test(uint(slot)), n.Labels.Map(), taints,
			r.reqCPU, r.allocCPU, r.reqMem, r.allocMem, r.reqEph, r.pods, r.allocPods, r.nzCPU, r.nzMem, scalars, e.buckets.of[slot], pods)
	}
	for _, k := range slices.Sorted(maps.Keys(e.groups.m)) {
		fmt.Fprintf(&b, "group %s total=%d counts=%v\n", k, e.groups.m[k].total, e.groups.m[k].counts)
	}
	for id, te := range e.taints.list {
		fmt.Fprintf(&b, "taint %v id=%d n=%d nodes=%v\n", te.t, id, te.n, te.nodes)
	}
	// Both label indexes (the engine's and the readers'), over every key
	// any node has ever had here.
	keys := map[string]bool{"zone": true, "rack": true, "size": true, "gpu": true, "kubernetes.io/hostname": true}
	for _, n := range e.nodes {
		if n != nil {
			for k := range n.Labels.All() {
				keys[k] = true
			}
		}
	}
	for _, ix := range []struct {
		name string
		p    *label.Postings
	}{{"engine", e.labels}, {"view", s.v.labels}} {
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			var vals []string
			ix.p.Values(k, func(val string, p *label.Posting) bool {
				var slots []uint32
				if bs := p.Bits(); bs != nil {
					for i, ok := bs.NextSet(0); ok; i, ok = bs.NextSet(i + 1) {
						slots = append(slots, uint32(i))
					}
				} else {
					slots = append(slots, p.List()...)
				}
				vals = append(vals, fmt.Sprintf("%s=%v", val, slots))
				return true
			})
			slices.Sort(vals)
			fmt.Fprintf(&b, "%s labels %s: %v\n", ix.name, k, vals)
		}
	}
	// What readers see.
	v := &s.v
	fmt.Fprintf(&b, "view rev=%d live=%v\n", v.rev, v.live)
	v.nodes.Ascend(func(it *nodeItem) bool {
		fmt.Fprintf(&b, "view node %s slot=%d requested=%+v pods=%d\n", it.node.Name, it.slot, it.requested, len(it.pods))
		return true
	})
	v.placements.Ascend(func(p *Placement) bool {
		fmt.Fprintf(&b, "view placement %s on %s\n", p.Key, p.Node)
		return true
	})
	return b.String()
}

// checkLabelIndexes checks that the engine's and the readers' label
// indexes hold exactly the live nodes' labels at their slots.
func checkLabelIndexes(t *testing.T, s *Scheduler) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[string]bool{}
	keys := map[string]bool{}
	for slot, n := range s.e.nodes {
		if n == nil {
			continue
		}
		for k, v := range n.Labels.All() {
			want[fmt.Sprintf("%d %s=%s", slot, k, v)] = true
			keys[k] = true
		}
	}
	for name, ix := range map[string]*label.Postings{"engine": s.e.labels, "view": s.v.labels} {
		got := map[string]bool{}
		for k := range keys {
			ix.Values(k, func(val string, p *label.Posting) bool {
				add := func(slot uint32) { got[fmt.Sprintf("%d %s=%s", slot, k, val)] = true }
				if bs := p.Bits(); bs != nil {
					for i, ok := bs.NextSet(0); ok; i, ok = bs.NextSet(i + 1) {
						add(uint32(i))
					}
				} else {
					for _, slot := range p.List() {
						add(slot)
					}
				}
				return true
			})
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s label index holds %v, the nodes %v", name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
}

// applyAsFollower applies ops as the catalog's follower does: runs of one
// kind, a delete as a key only; objects re-decoded from their records when
// decode is set (a change another server made).
func applyAsFollower(t *testing.T, s *Scheduler, rev int64, ops []Op, decode bool) {
	t.Helper()
	start := 0
	for start < len(ops) {
		end := start + 1
		for end < len(ops) && ops[end].Kind == ops[start].Kind {
			end++
		}
		run := make([]Op, 0, end-start)
		for _, op := range ops[start:end] {
			c := Op{Kind: op.Kind, Key: op.Key, Delete: op.Delete, Node: op.Node, Placement: op.Placement}
			if decode && !op.Delete {
				if op.Node != nil {
					c.Node = new(Node)
					if err := c.Node.UnmarshalBinary(op.Value()); err != nil {
						t.Fatal(err)
					}
				} else {
					c.Placement = new(Placement)
					if err := c.Placement.UnmarshalBinary(op.Value()); err != nil {
						t.Fatal(err)
					}
				}
			}
			run = append(run, c)
		}
		if err := s.Apply(rev, run); err != nil {
			t.Fatalf("apply at %d: %v", rev, err)
		}
		start = end
	}
}

// step is one random request of the sequence, run against a Txn.
type step func(tx *Txn) string

func randomStep(t *testing.T, g gen, i int, nodeNames *[]string) step {
	switch x := g.r.IntN(10); {
	case x < 3:
		var recs []*Node
		for range 1 + g.r.IntN(3) {
			name := "n" + strconv.Itoa(g.r.IntN(12))
			if slices.ContainsFunc(recs, func(n *Node) bool { return n.Name == name }) {
				continue
			}
			rec, err := CompileNode(g.node(name), "")
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
		return func(tx *Txn) string {
			out := tx.UpsertNodes(recs)
			var b strings.Builder
			for _, n := range out {
				fmt.Fprintf(&b, "%s:%d ", n.Name, n.Seq)
			}
			return "upsert " + b.String()
		}
	case x < 4:
		name := "n" + strconv.Itoa(g.r.IntN(12))
		return func(tx *Txn) string {
			keys, err := tx.DeleteNode(name)
			return fmt.Sprintf("delete node %s: %v %v", name, keys, err)
		}
	case x < 5:
		k := Key{"default", "p" + strconv.Itoa(g.r.IntN(max(i, 1)))}
		return func(tx *Txn) string { return fmt.Sprintf("delete %s: %v", k, tx.DeletePlacement(k)) }
	}
	var ws []*Workload
	for j := range 1 + g.r.IntN(4) {
		p := g.pod("p" + strconv.Itoa(i) + "-" + strconv.Itoa(j))
		p.Namespace = "default"
		w, err := CompilePod(p, "")
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	return func(tx *Txn) string {
		res, err := tx.Place(ws)
		return fmt.Sprintf("place %+v %v", res, err)
	}
}

// TestAbortThenApplyEqualsCommit runs random batches of requests on two
// schedulers: one commits each batch, the other aborts it and applies its
// ops as the follower would. After every batch their whole state, and so
// every later decision, must be the same.
func TestAbortThenApplyEqualsCommit(t *testing.T) {
	clusters, batches := 25, 30
	if testing.Short() {
		clusters = 10
	}
	for c := range clusters {
		g := gen{rand.New(rand.NewPCG(uint64(c), 99))}
		committed, applied := New(Config{}), New(Config{})
		var names []string
		rev := int64(0)
		for b := range batches {
			var steps []step
			for range 1 + g.r.IntN(4) {
				steps = append(steps, randomStep(t, g, b*10+len(steps), &names))
			}
			txA, txB := committed.Begin(), applied.Begin()
			for i, st := range steps {
				a, bb := st(txA), st(txB)
				if a != bb {
					t.Fatalf("cluster %d batch %d step %d: committed decided %s, applied %s", c, b, i, a, bb)
				}
			}
			ops := slices.Clone(txB.Ops())
			if len(ops) > 0 { // a request that changes nothing takes no revision
				rev++
			}
			txA.Commit(rev)
			txB.Abort()
			applyAsFollower(t, applied, rev, ops, b%2 == 1)
			checkLabelIndexes(t, committed)
			checkLabelIndexes(t, applied)
			if fa, fb := fingerprint(committed), fingerprint(applied); fa != fb {
				t.Fatalf("cluster %d batch %d: states differ\ncommitted:\n%s\napplied:\n%s", c, b, fa, fb)
			}
		}
		committed.Close()
		applied.Close()
	}
}

// TestAbortGivesBackSlots: an aborted batch of new nodes leaves no dead
// slots behind, so the same nodes applied later take the same slots.
func TestAbortGivesBackSlots(t *testing.T) {
	s := newCluster(t, mkNode("a", "1", "1Gi", "110"))
	before := fingerprint(s)
	tx := s.Begin()
	var recs []*Node
	for _, name := range []string{"b", "c", "d"} {
		n, _ := CompileNode(mkNode(name, "2", "2Gi", "110", "zone", name), "")
		recs = append(recs, n)
	}
	tx.UpsertNodes(recs)
	if _, err := tx.Place(compile(t, mkPod("p", rl("cpu", "1500m")))); err != nil {
		t.Fatal(err)
	}
	tx.Abort()
	if after := fingerprint(s); after != before {
		t.Fatalf("abort left\n%s\nwant\n%s", after, before)
	}
	if n := len(s.e.nodes); n != 1 {
		t.Fatalf("%d slots after abort, want 1", n)
	}
}

// TestCommitListsPlacementsOfANodeReplacedLater: a Txn that creates a
// node, places on it and replaces it publishes the placements under the
// node (the readers' view once dropped them).
func TestCommitListsPlacementsOfANodeReplacedLater(t *testing.T) {
	s := New(Config{})
	a1, _ := CompileNode(mkNode("a", "2", "2Gi", "110"), "")
	a2, _ := CompileNode(mkNode("a", "4", "2Gi", "110"), "")
	tx := s.Begin()
	tx.UpsertNodes([]*Node{a1})
	if _, err := tx.Place(compile(t, mkPod("p", rl("cpu", "1")))); err != nil {
		t.Fatal(err)
	}
	tx.UpsertNodes([]*Node{a2})
	tx.Commit(1)
	info, _, _ := s.Node("a")
	if info.Placements != 1 || info.Requested.CPU != 1000 || info.Node.Allocatable.CPU != 4000 {
		t.Fatalf("node a = %+v", info)
	}
	if ps, _, _ := s.Placements(PlacementQuery{Node: "a"}); len(ps) != 1 {
		t.Fatalf("placements on a = %v", ps)
	}
}
