package placement

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextant-mesh/sextant/internal/label"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newCluster(t testing.TB, nodes ...*corev1.Node) *Scheduler {
	t.Helper()
	s := New(Config{})
	recs := make([]*Node, len(nodes))
	for i, n := range nodes {
		r, err := CompileNode(n, "")
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = r
	}
	tx := s.Begin()
	tx.UpsertNodes(recs)
	tx.Commit(1)
	return s
}

func compile(t testing.TB, ps ...*corev1.Pod) []*Workload {
	t.Helper()
	ws := make([]*Workload, len(ps))
	for i, p := range ps {
		w, err := CompilePod(p, "")
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	return ws
}

// memStore is a stand-in for the durable layer: it keeps every op by key and
// hands out revisions, so tests can rebuild a scheduler from "disk".
type memStore struct {
	mu    sync.Mutex
	rev   int64
	nodes map[string][]byte
	pls   map[string][]byte
	fail  bool
}

func newStore() *memStore { return &memStore{nodes: map[string][]byte{}, pls: map[string][]byte{}} }

func (st *memStore) persist(ops []Op) (int64, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.fail {
		return 0, errors.New("disk full")
	}
	for _, op := range ops {
		m := st.pls
		if op.Kind == KindNodes {
			m = st.nodes
		}
		if op.Delete {
			delete(m, op.Key)
		} else {
			m[op.Key] = op.Value()
		}
	}
	st.rev++
	return st.rev, nil
}

func (st *memStore) load(t testing.TB) *Scheduler {
	var ns, ps [][]byte
	for _, b := range st.nodes {
		ns = append(ns, b)
	}
	for _, b := range st.pls {
		ps = append(ps, b)
	}
	s := New(Config{})
	if err := s.LoadEncoded(st.rev, ns, ps); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPlaceBatchSeesEarlierDecisions(t *testing.T) {
	s := newCluster(t, mkNode("a", "1", "1Gi", "110"), mkNode("b", "1", "1Gi", "110"))
	var ps []*corev1.Pod
	for i := range 3 {
		ps = append(ps, mkPod(fmt.Sprintf("p%d", i), rl("cpu", "600m")))
	}
	res, _, err := s.Place(compile(t, ps...), newStore().persist)
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{{Key: Key{"default", "p0"}, Node: "a"}, {Key: Key{"default", "p1"}, Node: "b"},
		{Key: Key{"default", "p2"}, Unschedulable: "0/2 nodes are available: 2 Insufficient cpu."}}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestPlaceConflictChangesNothing(t *testing.T) {
	s := newCluster(t, mkNode("a", "4", "4Gi", "110"))
	st := newStore()
	if _, _, err := s.Place(compile(t, mkPod("p", rl("cpu", "1"))), st.persist); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Place(compile(t, mkPod("q", rl("cpu", "1")), mkPod("p", rl("cpu", "1"))), st.persist)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if _, _, ok := s.Placement(Key{"default", "q"}); ok {
		t.Fatal("q placed by a rejected batch")
	}
	n, _, _ := s.Node("a")
	if n.Requested.CPU != 1000 || n.Placements != 1 {
		t.Fatalf("node a = %+v", n)
	}
}

// TestFailedPersistPlacesNothing: when the durable write fails, the
// decisions are undone and a later placement sees the free capacity.
func TestFailedPersistPlacesNothing(t *testing.T) {
	s := newCluster(t, mkNode("a", "1", "1Gi", "110"))
	st := newStore()
	st.fail = true
	if _, _, err := s.Place(compile(t, mkPod("p", rl("cpu", "1"))), st.persist); err == nil {
		t.Fatal("place succeeded with a failing store")
	}
	st.fail = false
	res, _, err := s.Place(compile(t, mkPod("q", rl("cpu", "1"))), st.persist)
	if err != nil || res[0].Node != "a" {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	if _, _, ok := s.Placement(Key{"default", "p"}); ok {
		t.Fatal("p visible after a failed persist")
	}
}

func TestAbortRestoresNodes(t *testing.T) {
	s := newCluster(t, mkNode("a", "1", "1Gi", "110", "zone", "x"))
	st := newStore()
	if _, _, err := s.Place(compile(t, mkPod("p", rl("cpu", "500m"))), st.persist); err != nil {
		t.Fatal(err)
	}
	tx := s.Begin()
	if _, err := tx.DeleteNode("a"); err != nil {
		t.Fatal(err)
	}
	b, _ := CompileNode(mkNode("b", "8", "8Gi", "110", "zone", "y"), "")
	tx.UpsertNodes([]*Node{b})
	tx.Abort()
	items, _, _ := s.Nodes(nil, "", 0)
	if len(items) != 1 || items[0].Node.Name != "a" || items[0].Placements != 1 {
		t.Fatalf("nodes after abort = %+v", items)
	}
	sel, _ := label.Parse("zone=x")
	if items, _, _ := s.Nodes(sel, "", 0); len(items) != 1 {
		t.Fatalf("selector after abort = %+v", items)
	}
	res, _, err := s.Place(compile(t, mkPod("q", rl("cpu", "600m"))), st.persist)
	if err != nil || res[0].Unschedulable != "0/1 nodes are available: 1 Insufficient cpu." {
		t.Fatalf("after abort: %+v %v", res, err)
	}
}

func TestDeleteNodeReleasesPlacements(t *testing.T) {
	s := newCluster(t, mkNode("a", "4", "4Gi", "110"), mkNode("b", "1", "1Gi", "110"))
	st := newStore()
	named := func(name, node string) *corev1.Pod {
		p := mkPod(name, rl("cpu", "100m"))
		p.Spec.NodeName = node
		return p
	}
	if _, _, err := s.Place(compile(t, named("p2", "a"), named("p1", "a"), named("q", "b")), st.persist); err != nil {
		t.Fatal(err)
	}
	tx := s.Begin()
	released, err := tx.DeleteNode("a")
	if err != nil {
		t.Fatal(err)
	}
	tx.Commit(9)
	if diff := cmp.Diff([]Key{{"default", "p1"}, {"default", "p2"}}, released); diff != "" {
		t.Fatal(diff)
	}
	if items, _, _ := s.Placements(PlacementQuery{}); len(items) != 1 || items[0].Name != "q" {
		t.Fatalf("placements = %+v", items)
	}
	tx = s.Begin()
	if _, err := tx.DeleteNode("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
	if err := tx.DeletePlacement(Key{"default", "p1"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
	tx.Abort()
}

func TestListingsPage(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 7 {
		nodes = append(nodes, mkNode(fmt.Sprintf("n%d", i), "4", "4Gi", "110", "zone", fmt.Sprint(i%2)))
	}
	s := newCluster(t, nodes...)
	var ps []*corev1.Pod
	for i := range 9 {
		p := mkPod(fmt.Sprintf("p%d", i), rl("cpu", "100m"), "app", fmt.Sprint(i%3))
		if i%2 == 1 {
			p.Namespace = "other"
		}
		ps = append(ps, p)
	}
	if _, _, err := s.Place(compile(t, ps...), newStore().persist); err != nil {
		t.Fatal(err)
	}
	sel, _ := label.Parse("zone=1")
	var got []string
	after := ""
	for {
		items, _, more := s.Nodes(sel, after, 2)
		for _, it := range items {
			got = append(got, it.Node.Name)
		}
		if !more {
			break
		}
		after = items[len(items)-1].Node.Name
	}
	if diff := cmp.Diff([]string{"n1", "n3", "n5"}, got); diff != "" {
		t.Fatal(diff)
	}
	app, _ := label.Parse("app in (0,1)")
	var keys []string
	var next Key
	for {
		items, _, more := s.Placements(PlacementQuery{Namespace: "other", Selector: app, After: next, Limit: 1})
		for _, p := range items {
			keys = append(keys, p.Key.String())
		}
		if !more {
			break
		}
		next = items[len(items)-1].Key
	}
	if diff := cmp.Diff([]string{"other/p1", "other/p3", "other/p7"}, keys); diff != "" {
		t.Fatal(diff)
	}
	total := 0
	for _, n := range nodes {
		items, _, _ := s.Placements(PlacementQuery{Node: n.Name})
		it, _, _ := s.Node(n.Name)
		if len(items) != it.Placements || it.Requested.CPU != int64(100*len(items)) {
			t.Fatalf("node %s: %d listed, info %+v", n.Name, len(items), it)
		}
		total += len(items)
	}
	if total != 9 {
		t.Fatalf("%d placements by node", total)
	}
}

// TestReloadDecidesTheSame stores every change, rebuilds a scheduler from
// the records, and requires it to make the same next decisions: the
// start-up story, and decisions as a pure function of the records.
func TestReloadDecidesTheSame(t *testing.T) {
	g := gen{r: newRand(3)}
	st := newStore()
	s := New(Config{})
	var recs []*Node
	for i := range 12 {
		r, err := CompileNode(g.node(fmt.Sprintf("n%d", i)), "")
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	tx := s.Begin()
	tx.UpsertNodes(recs)
	rev, err := st.persist(tx.Ops())
	if err != nil {
		t.Fatal(err)
	}
	tx.Commit(rev)
	for i := range 60 {
		if _, _, err := s.Place(compile(t, g.pod(fmt.Sprintf("p%d", i))), st.persist); err != nil {
			t.Fatal(err)
		}
	}
	re := st.load(t)
	if re.Revision() != s.Revision() {
		t.Fatalf("revision %d after reload, want %d", re.Revision(), s.Revision())
	}
	for i := range 40 {
		p := g.pod(fmt.Sprintf("next%d", i))
		a, _, err1 := s.Place(compile(t, p), st.persist)
		b, _, err2 := re.Place(compile(t, p), func([]Op) (int64, error) { return 0, nil })
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if a[0] != b[0] {
			t.Fatalf("pod %d: live %+v, reloaded %+v", i, a[0], b[0])
		}
	}
}

// TestConcurrentPlacersNeverOvercommit: many goroutines place at once;
// every node ends within its allocatable, and the view agrees with the
// sum of what was acknowledged.
func TestConcurrentPlacersNeverOvercommit(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 10 {
		nodes = append(nodes, mkNode(fmt.Sprintf("n%d", i), "1", "1Gi", "110"))
	}
	s := newCluster(t, nodes...)
	st := newStore()
	var wg sync.WaitGroup
	var mu sync.Mutex
	placed := map[string]int64{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				p := mkPod(fmt.Sprintf("g%d-%d", g, i), rl("cpu", "300m"))
				res, _, err := s.Place(compile(t, p), st.persist)
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Node != "" {
					mu.Lock()
					placed[res[0].Node] += 300
					mu.Unlock()
				}
				s.Nodes(nil, "", 0) // readers run beside the writers
			}
		}()
	}
	wg.Wait()
	sum := int64(0)
	for _, n := range nodes {
		it, _, _ := s.Node(n.Name)
		if it.Requested.CPU > 1000 || it.Requested.CPU != placed[n.Name] {
			t.Fatalf("node %s: requested %d, acknowledged %d", n.Name, it.Requested.CPU, placed[n.Name])
		}
		sum += it.Requested.CPU
	}
	if sum != 10*900 {
		t.Fatalf("placed %dm in all, want every node filled to 900m", sum)
	}
}

func TestApplyFollowsRecords(t *testing.T) {
	s := New(Config{})
	n, _ := CompileNode(mkNode("a", "1", "1Gi", "110"), "")
	n.Seq = 5
	w := compile(t, mkPod("p", rl("cpu", "400m")))[0]
	if err := s.Apply(3, []Op{{Kind: KindNodes, Key: "a", Node: n}, {Kind: KindPlacements, Key: "default/p", Placement: w.Placement("a")}}); err != nil {
		t.Fatal(err)
	}
	it, rev, _ := s.Node("a")
	if rev != 3 || it.Requested.CPU != 400 {
		t.Fatalf("after apply: %+v rev %d", it, rev)
	}
	err := s.Apply(4, []Op{{Kind: KindPlacements, Key: "default/q", Placement: w.Placement("missing")}})
	if !errors.Is(err, ErrNotFound) || s.Revision() != 3 {
		t.Fatalf("err = %v, revision %d", err, s.Revision())
	}
	if err := s.Apply(5, []Op{{Kind: KindPlacements, Key: "default/p", Delete: true}}); err != nil {
		t.Fatal(err)
	}
	if it, _, _ := s.Node("a"); it.Requested.CPU != 0 {
		t.Fatalf("after delete: %+v", it)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	g := gen{r: newRand(9)}
	for i := range 200 {
		n, err := CompileNode(g.node(fmt.Sprintf("n%d", i)), "")
		if err != nil {
			t.Fatal(err)
		}
		n.Seq = uint64(i)
		b, _ := n.MarshalBinary()
		var back Node
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(n, &back, cmp.Comparer(func(a, b label.Labels) bool { return a.Equal(b) })); diff != "" {
			t.Fatal(diff)
		}
		w, err := CompilePod(g.pod(fmt.Sprintf("p%d", i)), "")
		if err != nil {
			t.Fatal(err)
		}
		p := w.Placement("n1")
		b, _ = p.MarshalBinary()
		var bp Placement
		if err := bp.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(p, &bp, cmp.Comparer(func(a, b label.Labels) bool { return a.Equal(b) })); diff != "" {
			t.Fatal(diff)
		}
		for cut := range len(b) {
			if err := new(Placement).UnmarshalBinary(b[:cut]); err == nil {
				t.Fatalf("truncated record at %d decoded", cut)
			}
		}
	}
}

// TestCompactionKeepsOrderAndState deletes most nodes so that the slots
// are renumbered, and checks that placements, listings and the tie-break
// (creation order) survive.
func TestCompactionKeepsOrderAndState(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 2400 {
		nodes = append(nodes, mkNode(fmt.Sprintf("n%04d", 2400-i), "1", "1Gi", "110", "keep", fmt.Sprint(i%2)))
	}
	s := newCluster(t, nodes...)
	st := newStore()
	named := mkPod("p", rl("cpu", "100m"))
	named.Spec.NodeName = "n0003" // created among the last
	if _, _, err := s.Place(compile(t, named), st.persist); err != nil {
		t.Fatal(err)
	}
	tx := s.Begin()
	for i := range 2400 {
		if i%3 != 0 {
			if _, err := tx.DeleteNode(fmt.Sprintf("n%04d", 2400-i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tx.Commit(7)
	if got := len(s.e.nodes); got != 800 {
		t.Fatalf("%d slots after compaction, want 800", got)
	}
	sel, _ := label.Parse("keep=1")
	if items, rev, _ := s.Nodes(sel, "", 0); len(items) != 400 || rev != 7 {
		t.Fatalf("%d nodes listed at revision %d", len(items), rev)
	}
	if it, _, _ := s.Node("n0003"); it.Placements != 1 || it.Requested.CPU != 100 {
		t.Fatalf("n0003 = %+v", it)
	}
	// The earliest surviving node (n2400, created first) wins a tie.
	res, _, err := s.Place(compile(t, mkPod("q", rl("cpu", "100m"))), st.persist)
	if err != nil || res[0].Node != "n2400" {
		t.Fatalf("res = %+v, err %v", res, err)
	}
}
