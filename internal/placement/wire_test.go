package placement

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// These tests run the scheduler as the server does: its two catalog tables
// in a real registry over the real embedded (pebble) store in a temp dir.

// heldStore is the embedded store with a commit that can be held (so that
// requests queue into one batch) or failed (a disk that fails on demand
// cannot be had here).
type heldStore struct {
	*embedded.Store
	mu      sync.Mutex
	hold    chan struct{} // if set, the next Commit waits for it to close
	held    chan struct{} // closed when a Commit waits on hold
	failing bool
	queued  chan commit.Write // if set, receives each write Submit queues
}

// noteQueued is the registry's Queued hook.
func (s *heldStore) noteQueued(w commit.Write) {
	s.mu.Lock()
	q := s.queued
	s.mu.Unlock()
	if q != nil {
		q <- w // buffered for every write queueBatch submits
	}
}

var errDisk = errors.New("disk on fire")

func (s *heldStore) Commit(txns []store.Txn, sync bool) ([]store.Result, error) {
	if err := s.before(); err != nil {
		return nil, err
	}
	return s.Store.Commit(txns, sync)
}

// CommitAsync overrides the embedded store's, which the registry prefers.
func (s *heldStore) CommitAsync(txns []store.Txn, sync bool) ([]store.Result, func() error, error) {
	if err := s.before(); err != nil {
		return nil, nil, err
	}
	return s.Store.CommitAsync(txns, sync)
}

// before holds and fails a commit as asked.
func (s *heldStore) before() error {
	s.mu.Lock()
	hold, held, fail := s.hold, s.held, s.failing
	s.hold = nil
	s.mu.Unlock()
	if hold != nil {
		close(held)
		<-hold
	}
	if fail {
		return errDisk
	}
	return nil
}

// holdNext makes the next commit wait until release is called; held is
// closed once it waits.
func (s *heldStore) holdNext() (held <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.held = make(chan struct{}), make(chan struct{})
	h := s.hold
	return s.held, func() { close(h) }
}

type durable struct {
	t   *testing.T
	dir string
	st  *heldStore
	eng *commit.Engine
	s   *Scheduler
}

func openDurable(t *testing.T, dir string) *durable {
	t.Helper()
	es, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Workers: 2})
	st := &heldStore{Store: es}
	eng, err := commit.Open(st, commit.Options{Tables: s.Tables(), Queued: st.noteQueued})
	if err != nil {
		es.Close()
		s.Close()
		t.Fatal(err)
	}
	d := &durable{t: t, dir: dir, st: st, eng: eng, s: s}
	t.Cleanup(d.close)
	return d
}

func (d *durable) close() {
	if d.eng == nil {
		return
	}
	d.eng.Close()
	d.st.Close()
	d.s.Close()
	d.eng = nil
}

func (d *durable) reopen() *durable {
	d.close()
	return openDurable(d.t, d.dir)
}

func (d *durable) submit(w commit.Write) int64 {
	d.t.Helper()
	rev, err := d.eng.Submit(context.Background(), w)
	if err != nil {
		d.t.Fatalf("%T: %v", w, err)
	}
	return rev
}

func (d *durable) nodes(ns ...*corev1.Node) int64 {
	d.t.Helper()
	var recs []*Node
	for _, n := range ns {
		r, err := CompileNode(n, "")
		if err != nil {
			d.t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return d.submit(&NodesWrite{Scheduler: d.s, Nodes: recs})
}

func (d *durable) place(ps ...*corev1.Pod) ([]Result, int64) {
	d.t.Helper()
	w := &PlaceWrite{Scheduler: d.s, Workloads: compile(d.t, ps...)}
	rev := d.submit(w)
	return w.Results, rev
}

// listing renders what readers see, with revisions and Seqs.
func listing(s *Scheduler) string {
	var out string
	nodes, rev, _ := s.Nodes(nil, "", 0)
	out += fmt.Sprintf("revision %d\n", rev)
	for _, it := range nodes {
		out += fmt.Sprintf("node %s seq=%d rev=%d requested=%+v placements=%d\n", it.Node.Name, it.Node.Seq, it.Node.Revision, it.Requested, it.Placements)
	}
	ps, _, _ := s.Placements(PlacementQuery{})
	for _, p := range ps {
		out += fmt.Sprintf("placement %s on %s rev=%d\n", p.Key, p.Node, p.Revision)
	}
	return out
}

// TestDurableRestartKeepsEverything: nodes and placements written through
// the registry survive a restart with their revisions and tie-break order,
// and the restarted server decides as the first would have.
func TestDurableRestartKeepsEverything(t *testing.T) {
	d := openDurable(t, t.TempDir())
	revA := d.nodes(mkNode("b", "1", "1Gi", "110", "zone", "x"), mkNode("a", "1", "1Gi", "110", "zone", "y"))
	res, revP := d.place(mkPod("p1", rl("cpu", "600m")), mkPod("p2", rl("cpu", "600m")), mkPod("p3", rl("cpu", "600m")))
	if revP != revA+1 {
		t.Fatalf("placement revision %d after node revision %d", revP, revA)
	}
	// Equal scores: the node created first (b, listed first) wins the tie.
	if res[0].Node != "b" || res[1].Node != "a" || res[2].Unschedulable != "0/2 nodes are available: 2 Insufficient cpu." {
		t.Fatalf("results %+v", res)
	}
	if p, _, ok := d.s.Placement(Key{"default", "p1"}); !ok || p.Revision != revP {
		t.Fatalf("placement p1 %+v, want revision %d", p, revP)
	}
	if info, _, _ := d.s.Node("a"); info.Node.Revision != revA || info.Node.Seq != 2 {
		t.Fatalf("node a %+v, want revision %d seq 2", info.Node, revA)
	}
	probe := &PlaceWrite{Scheduler: d.s, Workloads: compile(t, mkPod("probe", rl("cpu", "100m")))}
	if _, err := d.eng.DryRun(probe); err != nil {
		t.Fatal(err)
	}
	before := listing(d.s)

	d = d.reopen()
	if after := listing(d.s); after != before {
		t.Fatalf("after restart:\n%s\nbefore:\n%s", after, before)
	}
	probe2 := &PlaceWrite{Scheduler: d.s, Workloads: compile(t, mkPod("probe", rl("cpu", "100m")))}
	if _, err := d.eng.DryRun(probe2); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(probe2.Results) != fmt.Sprint(probe.Results) {
		t.Fatalf("after restart the probe goes to %+v, before to %+v", probe2.Results, probe.Results)
	}
	if listing(d.s) != before {
		t.Fatal("a dry run changed the state")
	}

	// Deletes are durable too.
	dn := &DeleteNodeWrite{Scheduler: d.s, Name: "a"}
	d.submit(dn)
	if fmt.Sprint(dn.Released) != "[default/p2]" {
		t.Fatalf("released %v", dn.Released)
	}
	dp := &DeletePlacementWrite{Scheduler: d.s, Key: Key{"default", "p1"}}
	d.submit(dp)
	if dp.Node != "b" {
		t.Fatalf("deleted placement was on %q", dp.Node)
	}
	before = listing(d.s)
	d = d.reopen()
	if after := listing(d.s); after != before {
		t.Fatalf("after restart:\n%s\nbefore:\n%s", after, before)
	}
	if _, err := d.eng.Submit(context.Background(), &DeleteNodeWrite{Scheduler: d.s, Name: "a"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleting a deleted node: %v", err)
	}
	if _, err := d.eng.Submit(context.Background(), &DeletePlacementWrite{Scheduler: d.s, Key: Key{"default", "p1"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleting a deleted placement: %v", err)
	}
}

// TestUnchangedNodesTakeNoRevision: re-applying the same nodes writes
// nothing; a changed one is written and keeps its Seq.
func TestUnchangedNodesTakeNoRevision(t *testing.T) {
	d := openDurable(t, t.TempDir())
	rev := d.nodes(mkNode("a", "1", "1Gi", "110"), mkNode("b", "1", "1Gi", "110"))
	recs := []*Node{}
	for _, n := range []*corev1.Node{mkNode("a", "1", "1Gi", "110"), mkNode("b", "2", "1Gi", "110")} {
		r, _ := CompileNode(n, "")
		recs = append(recs, r)
	}
	w := &NodesWrite{Scheduler: d.s, Nodes: recs[:1]}
	if got := d.submit(w); got != rev || len(w.Changed) != 0 {
		t.Fatalf("unchanged apply: revision %d changed %v, want %d and nothing", got, w.Changed, rev)
	}
	w = &NodesWrite{Scheduler: d.s, Nodes: recs}
	if got := d.submit(w); got != rev+1 || fmt.Sprint(w.Changed) != "[b]" {
		t.Fatalf("apply: revision %d changed %v", got, w.Changed)
	}
	if info, _, _ := d.s.Node("b"); info.Node.Seq != 2 || info.Node.Allocatable.CPU != 2000 || info.Node.Revision != rev+1 {
		t.Fatalf("b = %+v", info.Node)
	}
}

// queueBatch holds the store's next commit (behind a write of its own),
// submits writes one after the other, each once the one before it waits in
// the committer's queue, releases, and returns each write's error. All of
// them were queued while the committer was held, so they are planned in
// one batch, in order; the test fails if the Tx each planned with says
// otherwise.
func queueBatch(t *testing.T, d *durable, writes ...commit.Write) []error {
	t.Helper()
	held, hold := d.st.holdNext()
	var once sync.Once
	release := func() { once.Do(hold) }
	defer release() // a Fatal below must not leave the committer held
	first := make(chan error, 1)
	go func() {
		_, err := d.eng.Submit(context.Background(), &NodesWrite{Scheduler: d.s, Nodes: []*Node{{Name: "holder", Unschedulable: true}}})
		first <- err
	}()
	<-held
	queued := make(chan commit.Write, len(writes))
	d.st.mu.Lock()
	d.st.queued = queued
	d.st.mu.Unlock()
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = d.eng.Submit(context.Background(), w) }()
		if got := <-queued; got != w {
			t.Fatalf("queued %T, want write %d (%T)", got, i, w)
		}
	}
	d.st.mu.Lock()
	d.st.queued = nil
	d.st.mu.Unlock()
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var tx *commit.Tx
	for i, w := range writes {
		var wtx *commit.Tx
		switch w := w.(type) {
		case *PlaceWrite:
			wtx = w.tx
		case *NodesWrite:
			wtx = w.tx
		case *DeleteNodeWrite:
			wtx = w.tx
		case *DeletePlacementWrite:
			wtx = w.tx
		}
		if wtx == nil {
			t.Fatalf("write %d (%T) was not planned", i, w)
		}
		if tx == nil {
			tx = wtx
		}
		if wtx != tx {
			t.Fatalf("write %d (%T) was planned in another batch than write 0", i, w)
		}
	}
	return errs
}

// TestBatchNeverOvercommits: requests planned in one batch see each
// other's tentative placements, so together they never reserve more than
// a node has.
func TestBatchNeverOvercommits(t *testing.T) {
	d := openDurable(t, t.TempDir())
	d.nodes(mkNode("a", "1", "1Gi", "110"), mkNode("b", "1", "1Gi", "110"))
	var writes []commit.Write
	for i := range 12 {
		writes = append(writes, &PlaceWrite{Scheduler: d.s, Workloads: compile(t, mkPod(fmt.Sprintf("p%d", i), rl("cpu", "300m")))})
	}
	for i, err := range queueBatch(t, d, writes...) {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	placed := 0
	for _, w := range writes {
		if w.(*PlaceWrite).Results[0].Node != "" {
			placed++
		}
	}
	check := func(d *durable) {
		t.Helper()
		nodes, _, _ := d.s.Nodes(nil, "", 0)
		total := 0
		for _, it := range nodes {
			if it.Requested.CPU > it.Node.Allocatable.CPU {
				t.Fatalf("node %s over-committed: %d of %d", it.Node.Name, it.Requested.CPU, it.Node.Allocatable.CPU)
			}
			total += it.Placements
		}
		if total != 6 {
			t.Fatalf("%d placements, want 6 (3 of 300m per 1-cpu node)", total)
		}
	}
	if placed != 6 {
		t.Fatalf("%d placed, want 6", placed)
	}
	check(d)
	check(d.reopen())
}

// TestFailedPlanLeavesTheBatchAsItWas: a request of a batch that fails (409
// already placed, 404) reserves nothing the requests after it could see.
func TestFailedPlanLeavesTheBatchAsItWas(t *testing.T) {
	d := openDurable(t, t.TempDir())
	d.nodes(mkNode("a", "1", "1Gi", "110"))
	d.place(mkPod("old", rl("cpu", "100m")))
	bad := &PlaceWrite{Scheduler: d.s, Workloads: compile(t, mkPod("x", rl("cpu", "900m")), mkPod("old", nil))}
	missing := &DeleteNodeWrite{Scheduler: d.s, Name: "nope"}
	good := &PlaceWrite{Scheduler: d.s, Workloads: compile(t, mkPod("y", rl("cpu", "900m")))}
	errs := queueBatch(t, d, bad, missing, good)
	var pe *PlacedError
	if !errors.As(errs[0], &pe) || pe.Index != 1 || pe.Key != (Key{"default", "old"}) || pe.Node != "a" || !errors.Is(errs[0], ErrConflict) {
		t.Fatalf("bad write: %v", errs[0])
	}
	if !errors.Is(errs[1], ErrNotFound) {
		t.Fatalf("delete of a missing node: %v", errs[1])
	}
	if errs[2] != nil || good.Results[0].Node != "a" {
		t.Fatalf("good write: %v %+v", errs[2], good.Results)
	}
	if _, _, ok := d.s.Placement(Key{"default", "x"}); ok {
		t.Fatal("x of the failed request was placed")
	}
}

// TestFailedCommitPlacesNothing: when the store commit fails, the batch's
// decisions are dropped and the scheduler is as before.
func TestFailedCommitPlacesNothing(t *testing.T) {
	d := openDurable(t, t.TempDir())
	d.nodes(mkNode("a", "1", "1Gi", "110"))
	before := fingerprint(d.s)
	d.st.mu.Lock()
	d.st.failing = true
	d.st.mu.Unlock()
	w := &PlaceWrite{Scheduler: d.s, Workloads: compile(t, mkPod("p", rl("cpu", "500m")))}
	if _, err := d.eng.Submit(context.Background(), w); !errors.Is(err, errDisk) {
		t.Fatalf("err = %v", err)
	}
	if after := fingerprint(d.s); after != before {
		t.Fatalf("a failed commit changed the scheduler:\n%s", after)
	}
	d.st.mu.Lock()
	d.st.failing = false
	d.st.mu.Unlock()
	if res, _ := d.place(mkPod("p", rl("cpu", "500m"))); res[0].Node != "a" {
		t.Fatalf("after the failure: %+v", res)
	}
}

// TestAnotherWritersRecordsApply: records committed to the store by
// another writer (as another server of a cluster would) reach the
// scheduler through the store's stream, decoded.
func TestAnotherWritersRecordsApply(t *testing.T) {
	d := openDurable(t, t.TempDir())
	n, _ := CompileNode(mkNode("far", "2", "2Gi", "110"), "")
	n.Seq = 7
	p := compile(t, mkPod("remote", rl("cpu", "1500m")))[0].Placement("far")
	nb, _ := n.MarshalBinary()
	pb, _ := p.MarshalBinary()
	res, err := d.st.Store.Commit([]store.Txn{{Ops: []store.Op{
		{Kind: store.Nodes, Key: "far", Value: nb},
		{Kind: store.Placements, Key: "default/remote", Value: pb, Check: true},
	}}}, true)
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.eng.Catalog().Revision() < res[0].Revision {
		if time.Now().After(deadline) {
			t.Fatal("the follower did not apply the change")
		}
		time.Sleep(time.Millisecond)
	}
	info, _, ok := d.s.Node("far")
	if !ok || info.Requested.CPU != 1500 || info.Node.Revision != res[0].Revision || info.Node.Seq != 7 {
		t.Fatalf("node far = %+v %v", info, ok)
	}
	if r, _ := d.place(mkPod("local", rl("cpu", "1"))); r[0].Unschedulable == "" {
		t.Fatalf("placed on a node another server filled: %+v", r)
	}
}

// TestLoadKeepsWhatIsConsistent: a stored placement whose node is gone
// (two servers racing a node delete and a placement on it) is skipped at
// start-up, and everything else loads.
func TestLoadKeepsWhatIsConsistent(t *testing.T) {
	dir := t.TempDir()
	es, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := CompileNode(mkNode("a", "2", "2Gi", "110"), "")
	n.Seq = 1
	ok := compile(t, mkPod("ok", rl("cpu", "1")))[0].Placement("a")
	orphan := compile(t, mkPod("orphan", rl("cpu", "1")))[0].Placement("gone")
	nb, _ := n.MarshalBinary()
	okb, _ := ok.MarshalBinary()
	ob, _ := orphan.MarshalBinary()
	if _, err := es.Commit([]store.Txn{{Ops: []store.Op{
		{Kind: store.Nodes, Key: "a", Value: nb},
		{Kind: store.Placements, Key: "default/ok", Value: okb},
		{Kind: store.Placements, Key: "default/orphan", Value: ob},
	}}}, true); err != nil {
		t.Fatal(err)
	}
	es.Close()
	d := openDurable(t, dir)
	if _, _, found := d.s.Placement(Key{"default", "ok"}); !found {
		t.Fatal("the consistent placement was not loaded")
	}
	if _, _, found := d.s.Placement(Key{"default", "orphan"}); found {
		t.Fatal("a placement on a missing node was loaded")
	}
	if info, _, _ := d.s.Node("a"); info.Requested.CPU != 1000 {
		t.Fatalf("node a = %+v", info)
	}
}

// TestDryRunsBesideCommits: dry runs plan on their own goroutines while
// the committer plans batches; they never leave a reservation behind, and
// committed placements never over-commit (run with -race).
func TestDryRunsBesideCommits(t *testing.T) {
	d := openDurable(t, t.TempDir())
	d.nodes(mkNode("a", "2", "2Gi", "110"), mkNode("b", "2", "2Gi", "110"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	placed := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				pod := mkPod(fmt.Sprintf("g%d-%d", g, i), rl("cpu", "150m"))
				w := &PlaceWrite{Scheduler: d.s, Workloads: compile(t, pod)}
				var err error
				if g%2 == 0 {
					_, err = d.eng.DryRun(w)
				} else {
					_, err = d.eng.Submit(context.Background(), w)
					if err == nil && w.Results[0].Node != "" {
						mu.Lock()
						placed++
						mu.Unlock()
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	nodes, _, _ := d.s.Nodes(nil, "", 0)
	total := 0
	for _, it := range nodes {
		if it.Requested.CPU > it.Node.Allocatable.CPU {
			t.Fatalf("node %s over-committed", it.Node.Name)
		}
		total += it.Placements
	}
	if total != placed || placed != 26 {
		t.Fatalf("%d placements held, %d answered placed; want 26 (13 of 150m per 2-cpu node)", total, placed)
	}
}
