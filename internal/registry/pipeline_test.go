package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// TestPipelinedWrites drives concurrent writers, each over ids of its own,
// with registers, re-registers that change fields or move an instance to
// another service, and deregisters, so that the committer runs ahead of the
// follower (pipeline.go). Every answer must be readable at once
// (read-your-writes), a re-register keeps CreatedAt, the catalog counts what
// the writers hold, and after a restart the store holds exactly what they
// were last told. (Plans against in-flight writes of the same id:
// TestPlanSeesCommittedUnappliedWrites.)
func TestPipelinedWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, closeAll := open(t, dir, nil)
	const writers, rounds, ids = 6, 150, 12
	type want struct {
		port    int
		created int64 // unix nanos of the first register of this life
	}
	models := make([]map[string]*want, writers)
	var wg sync.WaitGroup
	for w := range writers {
		models[w] = map[string]*want{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			m := models[w]
			for round := range rounds {
				var batch []*instance.Instance
				var gone []string
				for i := range 1 + rng.IntN(4) {
					id := fmt.Sprintf("w%d-%d", w, rng.IntN(ids))
					if i > 0 && (contains(gone, id) || containsID(batch, id)) {
						continue
					}
					if m[id] != nil && rng.IntN(3) == 0 {
						gone = append(gone, id)
						continue
					}
					in := &instance.Instance{ID: id, Service: fmt.Sprintf("s%d", rng.IntN(3)), Host: "10.0.0.1",
						Port: 1 + rng.IntN(3), Weight: instance.DefaultWeight,
						Metadata: label.FromMap(map[string]string{"round": fmt.Sprint(round % 2)})}
					if err := instance.Prepare(-1, in); err != nil {
						t.Error(err)
						return
					}
					batch = append(batch, in)
				}
				if len(gone) > 0 {
					if _, nf, err := r.Deregister(ctx, gone); err != nil || len(nf) != 0 {
						t.Errorf("deregister %v: not found %v, %v", gone, nf, err)
						return
					}
					for _, id := range gone {
						delete(m, id)
						if r.Instances().Get(id) != nil {
							t.Errorf("%s still in the catalog after its deregister was answered", id)
							return
						}
					}
				}
				if len(batch) == 0 {
					continue
				}
				rev, err := r.Register(ctx, batch)
				if err != nil {
					t.Error(err)
					return
				}
				for _, in := range batch {
					got := r.Instances().Get(in.ID)
					if got == nil || got.Port != in.Port || got.Revision > rev {
						t.Errorf("%s after its register (revision %d) was answered: %+v", in.ID, rev, got)
						return
					}
					if m[in.ID] == nil {
						m[in.ID] = &want{created: got.CreatedAt.UnixNano()}
					} else if got.CreatedAt.UnixNano() != m[in.ID].created {
						t.Errorf("%s: a re-register changed CreatedAt %d -> %d", in.ID, m[in.ID].created, got.CreatedAt.UnixNano())
						return
					}
					m[in.ID].port = in.Port
				}
			}
		}()
	}
	wg.Wait()
	live := 0
	for _, m := range models {
		live += len(m)
	}
	if got := r.Instances().Len(); got != live {
		t.Errorf("catalog holds %d instances, want %d", got, live)
	}
	closeAll()
	if t.Failed() {
		return
	}
	r, closeAll = open(t, dir, nil)
	defer closeAll()
	n := 0
	for _, m := range models {
		for id, w := range m {
			n++
			got := r.Instances().Get(id)
			if got == nil || got.Port != w.port || got.CreatedAt.UnixNano() != w.created {
				t.Fatalf("after restart %s = %+v, want port %d created %d", id, got, w.port, w.created)
			}
		}
	}
	if r.Instances().Len() != n {
		t.Fatalf("after restart %d instances, want %d", r.Instances().Len(), n)
	}
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func containsID(ins []*instance.Instance, id string) bool {
	for _, in := range ins {
		if in.ID == id {
			return true
		}
	}
	return false
}

// gatedStore holds the follower's feed shut while gate is closed, so that
// commits pile up committed but not applied; committed counts commits.
type gatedStore struct {
	*embedded.Store
	gate      chan struct{}
	committed chan struct{}
}

func (g *gatedStore) Commit(txns []store.Txn, sync bool) ([]store.Result, error) {
	res, err := g.Store.Commit(txns, sync)
	g.committed <- struct{}{}
	return res, err
}

func (g *gatedStore) CommitAsync(txns []store.Txn, sync bool) ([]store.Result, func() error, error) {
	res, durable, err := g.Store.CommitAsync(txns, sync)
	g.committed <- struct{}{}
	return res, durable, err
}

func (g *gatedStore) Follow(since int64) (store.Feed, error) {
	f, err := g.Store.Follow(since)
	return gatedFeed{f, g.gate}, err
}

type gatedFeed struct {
	store.Feed
	gate chan struct{}
}

func (f gatedFeed) Next(ctx context.Context) ([]store.Change, error) {
	select {
	case <-f.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return f.Feed.Next(ctx)
}

// openGated opens a registry on a gated embedded store, both closed when
// the test ends (the registry first).
func openGated(t *testing.T, opts Options) (*Registry, *gatedStore) {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := &gatedStore{Store: st, gate: make(chan struct{}), committed: make(chan struct{}, 128)}
	r, err := Open(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, g
}

// awaitAnswers waits for n writes to be answered once the gate is open.
func awaitAnswers(t *testing.T, answered <-chan error, n int) {
	t.Helper()
	for range n {
		select {
		case err := <-answered:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("writes not answered 10 s after the follower was let go")
		}
	}
}

// TestPlanSeesCommittedUnappliedWrites: while the follower is held, a
// batch is committed and not applied; writes planned next must see it (a
// deregister finds the instance, a re-register keeps its CreatedAt) instead
// of the catalog's older state.
func TestPlanSeesCommittedUnappliedWrites(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	r, g := openGated(t, Options{Now: clk.Now})
	answered := make(chan error, 4)
	committed := func(what string) {
		t.Helper()
		select {
		case <-g.committed:
		case err := <-answered:
			t.Fatalf("%s was answered (%v) without a commit", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no commit in 10 s", what)
		}
	}
	go func() {
		_, err := r.Register(ctx, []*instance.Instance{testInstance("a", "s", 0), testInstance("b", "s", 0)})
		answered <- err
	}()
	committed("the first register") // committed, held from the catalog
	created := clk.Now()
	clk.Advance(time.Minute)
	var notFound []string
	go func() {
		var err error
		_, notFound, err = r.Deregister(ctx, []string{"a"})
		answered <- err
	}()
	committed("the deregister")
	b2 := testInstance("b", "s", 0)
	b2.Port = 81
	go func() { _, err := r.Register(ctx, []*instance.Instance{b2}); answered <- err }()
	committed("the second register")
	if r.Instances().Get("a") != nil || r.Instances().Len() != 0 {
		t.Fatal("the follower applied while held: the test no longer holds commits in flight")
	}
	close(g.gate)
	awaitAnswers(t, answered, 3)
	if len(notFound) != 0 || r.Instances().Get("a") != nil {
		t.Fatalf("deregister planned against an unapplied register: not found %v, a = %+v", notFound, r.Instances().Get("a"))
	}
	b := r.Instances().Get("b")
	if b == nil || b.Port != 81 || !b.CreatedAt.Equal(created) {
		t.Fatalf("b = %+v, want port 81 and CreatedAt %v (from the unapplied first register)", b, created)
	}
}

// TestFullPipelineGroupsQueuedWrites: with the follower held, the committer
// commits at most 2 batches past the one being answered and the one it
// hands off, then waits; writes that queue meanwhile go out as one commit
// when it may go on (a deep pipeline committed each request on its own).
func TestFullPipelineGroupsQueuedWrites(t *testing.T) {
	ctx := context.Background()
	r, g := openGated(t, Options{})
	answered := make(chan error, 128)
	register := func(id string) {
		go func() { _, err := r.Register(ctx, []*instance.Instance{testInstance(id, "s", 0)}); answered <- err }()
	}
	// One batch being answered, two waiting (maxInFlight), one committed
	// whose hand-off waits: then the committer waits too.
	sent := 0
	for ; sent < 4; sent++ {
		register(fmt.Sprintf("fill-%d", sent))
		select {
		case <-g.committed:
		case <-time.After(10 * time.Second):
			t.Fatalf("commit %d: none in 10 s", sent+1)
		}
	}
	register("queued")
	sent++
	select {
	case <-g.committed:
		// A deeper pipeline commits single registers a few at a time
		// (docs/perf/registry.md, issue 16 third pass).
		t.Fatalf("%d commits with none applied: more than 2 batches wait for the answerer", sent)
	case <-time.After(time.Second):
	}
	for i := range 20 {
		register(fmt.Sprintf("queued-%d", i))
	}
	sent += 20
	for deadline := time.Now().Add(10 * time.Second); r.eng.Queued() < 21; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want 21", r.eng.Queued())
		}
		time.Sleep(time.Millisecond)
	}
	close(g.gate)
	awaitAnswers(t, answered, sent)
	if late := len(g.committed); late != 1 {
		t.Fatalf("the 21 queued writes took %d commits, want 1", late)
	}
	if n := r.Instances().Len(); n != sent {
		t.Fatalf("%d instances, want %d", n, sent)
	}
}

// snapStore remembers a copy of every op it commits, by revision; its feed
// fails the test if the follower is handed ops or values that changed
// since (memory reused too early).
type snapStore struct {
	*embedded.Store
	t     *testing.T
	mu    sync.Mutex
	snaps map[int64][]opSnap
}

type opSnap struct {
	key          string
	value, saved []byte // as handed, and a copy at commit
}

func (s *snapStore) CommitAsync(txns []store.Txn, sync bool) ([]store.Result, func() error, error) {
	res, durable, err := s.Store.CommitAsync(txns, sync)
	if err == nil {
		s.mu.Lock()
		for i, r := range res {
			for _, op := range txns[i].Ops {
				if r.Err == nil {
					s.snaps[r.Revision] = append(s.snaps[r.Revision], opSnap{op.Key, op.Value, bytes.Clone(op.Value)})
				}
			}
		}
		s.mu.Unlock()
	}
	return res, durable, err
}

func (s *snapStore) Follow(since int64) (store.Feed, error) {
	f, err := s.Store.Follow(since)
	return snapFeed{f, s}, err
}

type snapFeed struct {
	store.Feed
	s *snapStore
}

func (f snapFeed) Next(ctx context.Context) ([]store.Change, error) {
	changes, err := f.Feed.Next(ctx)
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	for _, c := range changes {
		snaps := f.s.snaps[c.Revision]
		if len(c.Ops) != len(snaps) {
			f.s.t.Errorf("revision %d: %d ops reach the follower, %d were committed", c.Revision, len(c.Ops), len(snaps))
			continue
		}
		for i, op := range c.Ops {
			if op.Key != snaps[i].key || !bytes.Equal(op.Value, snaps[i].saved) {
				f.s.t.Errorf("revision %d: op %d changed between its commit and the follower", c.Revision, i)
			}
		}
	}
	return changes, err
}

// reused counts the values whose bytes changed after the follower had them.
func (s *snapStore) reused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ops := range s.snaps {
		for _, op := range ops {
			if !bytes.Equal(op.value, op.saved) {
				n++
			}
		}
	}
	return n
}

// TestEncodingChunksReusedAfterApply: the committer reuses a batch's memory
// (spares.go) for later batches, and only once the follower is done with
// it: the follower always gets the ops and bytes that were committed, and
// what it applied and what a restart reads agree. (Run with -race: the
// follower reading ops reused under it is a race.)
func TestEncodingChunksReusedAfterApply(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &snapStore{Store: st, t: t, snaps: make(map[int64][]opSnap)}
	r, err := Open(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 40 {
				var batch []*instance.Instance
				for i := range 50 {
					in := testInstance(fmt.Sprintf("w%d-%d", w, i), fmt.Sprint("s", w), 0)
					in.Port = 1 + round
					batch = append(batch, in)
				}
				if _, err := r.Register(ctx, batch); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	r.Close()
	st.Close()
	if t.Failed() {
		return
	}
	if s.reused() == 0 {
		t.Fatal("no encoding chunk was reused: the test no longer covers it")
	}
	r, closeAll := open(t, dir, nil)
	defer closeAll()
	for w := range 4 {
		for i := range 50 {
			id := fmt.Sprintf("w%d-%d", w, i)
			if got := r.Instances().Get(id); got == nil || got.Port != 40 {
				t.Fatalf("after restart %s = %+v, want port 40", id, got)
			}
		}
	}
}

// storeWith returns an embedded store, closed when the test ends, that
// holds instances registered and applied by a registry closed since.
func storeWith(t *testing.T, instances ...*instance.Instance) *embedded.Store {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r0, err := Open(st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Close()
	if len(instances) == 0 {
		return st
	}
	if _, err := r0.Register(context.Background(), instances); err != nil {
		t.Fatal(err)
	}
	return st
}

// openOn opens a registry on st, closed when the test ends.
func openOn(t *testing.T, st commit.Store, opts Options) *Registry {
	t.Helper()
	r, err := Open(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// openGatedWith is openGated over a store that already holds instances,
// registered and applied before the follower is held.
func openGatedWith(t *testing.T, opts Options, instances ...*instance.Instance) (*Registry, *gatedStore) {
	t.Helper()
	g := &gatedStore{Store: storeWith(t, instances...), gate: make(chan struct{}), committed: make(chan struct{}, 128)}
	return openOn(t, g, opts), g
}

// idleHandOffs has the committer of a registry opened with opts report
// each batch that wrote nothing and was handed to the answerer behind
// batches in flight.
func idleHandOffs(opts *Options) <-chan struct{} {
	ch := make(chan struct{}, 16)
	opts.Engine.IdleHanded = func() { ch <- struct{}{} }
	return ch
}

// handedOrAnswered waits until the committer has handed a write that
// wrote nothing to the answerer (which is held), and fails if the write is
// answered instead: it would be answered before the committed, unapplied
// batch it was decided on.
func handedOrAnswered(t *testing.T, handed <-chan struct{}, answered <-chan error, what string) {
	t.Helper()
	select {
	case <-handed:
	case err := <-answered:
		t.Fatalf("%s answered (err %v) while the write it rests on is committed but not applied", what, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: neither answered nor handed to the answerer in 10 s", what)
	}
}

// TestNotFoundWaitsForTheDeleteInFlight: a deregister that finds the
// instance deleted by a batch committed but not applied (two concurrent
// DELETEs) is answered only once that delete is applied: a client told
// "not found" must not find the instance on its next read, nor keep it
// after a crash.
func TestNotFoundWaitsForTheDeleteInFlight(t *testing.T) {
	ctx := context.Background()
	var opts Options
	handed := idleHandOffs(&opts)
	r, g := openGatedWith(t, opts, testInstance("x", "s", 0))
	first := make(chan error, 1)
	go func() { _, _, err := r.Deregister(ctx, []string{"x"}); first <- err }()
	<-g.committed
	second := make(chan error, 1)
	var notFound []string
	go func() {
		var err error
		_, notFound, err = r.Deregister(ctx, []string{"x"})
		second <- err
	}()
	handedOrAnswered(t, handed, second, "the second deregister")
	close(g.gate)
	awaitAnswers(t, second, 1)
	if r.Instances().Get("x") != nil {
		t.Fatal("x still in the catalog when the second deregister was answered not found")
	}
	if len(notFound) != 1 {
		t.Fatalf("second deregister: not found %v, want [x]", notFound)
	}
	awaitAnswers(t, first, 1)
}

// TestUnchangedOverInFlightRegister: re-registering the same fields while
// the first register is committed but not applied writes nothing more and
// answers the first one's revision.
func TestUnchangedOverInFlightRegister(t *testing.T) {
	ctx := context.Background()
	var opts Options
	handed := idleHandOffs(&opts)
	r, g := openGatedWith(t, opts, testInstance("other", "s", 0))
	type answer struct {
		rev int64
		err error
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		rev, err := r.Register(ctx, []*instance.Instance{testInstance("y", "s", 0)})
		first <- answer{rev, err}
	}()
	<-g.committed
	errs := make(chan error, 1)
	go func() {
		rev, err := r.Register(ctx, []*instance.Instance{testInstance("y", "s", 0)})
		second <- answer{rev, err}
		errs <- err
	}()
	handedOrAnswered(t, handed, errs, "the identical register")
	close(g.gate)
	a1, a2 := <-first, <-second
	if a1.err != nil || a2.err != nil {
		t.Fatal(a1.err, a2.err)
	}
	if len(g.committed) != 0 {
		t.Fatalf("the identical register was committed again (%d more commits)", len(g.committed))
	}
	if y := r.Instances().Get("y"); a1.rev == 0 || a2.rev != a1.rev || y == nil || y.Revision != a1.rev {
		t.Fatalf("first register at %d, the identical one answered %d, y = %+v: want both at y's revision", a1.rev, a2.rev, y)
	}
}

// syncFailStore commits into the real embedded store, but its fsync (the
// durable step of CommitAsync) waits for release and then fails: a disk
// that fails on demand cannot be had here.
type syncFailStore struct {
	*embedded.Store
	committed chan struct{}
	release   chan struct{}
}

func (s *syncFailStore) CommitAsync(txns []store.Txn, sync bool) ([]store.Result, func() error, error) {
	res, durable, err := s.Store.CommitAsync(txns, sync)
	s.committed <- struct{}{}
	return res, func() error { <-s.release; durable(); return errDisk }, err
}

// TestNotFoundFailsWithTheDeleteItRestsOn: a deregister answered "not
// found" because of a delete in flight fails if that delete's commit does:
// the client must not be told the instance is gone when that is not
// durable.
func TestNotFoundFailsWithTheDeleteItRestsOn(t *testing.T) {
	ctx := context.Background()
	s := &syncFailStore{Store: storeWith(t, testInstance("x", "s", 0)), committed: make(chan struct{}, 8), release: make(chan struct{})}
	var opts Options
	handed := idleHandOffs(&opts)
	r := openOn(t, s, opts)
	release := sync.OnceFunc(func() { close(s.release) })
	t.Cleanup(release) // before r closes, also when the test fails early
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { _, _, err := r.Deregister(ctx, []string{"x"}); first <- err }()
	<-s.committed
	// The answerer now waits on the first delete's fsync; the second
	// deregister finds x deleted in flight.
	go func() { _, _, err := r.Deregister(ctx, []string{"x"}); second <- err }()
	handedOrAnswered(t, handed, second, "the second deregister")
	release()
	if err := <-first; !errors.Is(err, errDisk) {
		t.Fatalf("first deregister: %v, want the disk error", err)
	}
	if err := <-second; !errors.Is(err, errDisk) {
		t.Fatalf("second deregister, decided on the failed delete: %v, want the disk error", err)
	}
}
