package catalog

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// TestChangeLogChunksAndCompaction: appends cross chunk boundaries, reads
// page by whole revisions, and history beyond the size is compacted with
// ErrCompacted naming where it starts.
func TestChangeLogChunksAndCompaction(t *testing.T) {
	var l changeLog
	const size = 3*chunkSize + 17
	l.init(size)
	all := kindSet{}
	rev := int64(0)
	// Revisions of 1..3 changes each, past two chunk boundaries and past
	// the size, so the oldest are compacted and whole chunks dropped.
	total := 0
	for total < 5*chunkSize {
		rev++
		n := 1 + int(rev%3)
		chs := make([]Change, n)
		for i := range chs {
			chs[i] = Change{Revision: rev, Kind: store.Instances, ID: fmt.Sprintf("%d/%d", rev, i)}
		}
		l.append(rev, chs)
		total += n
	}
	v := l.view.Load()
	if got := v.end - v.start; got != size {
		t.Fatalf("log holds %d changes, want %d", got, size)
	}
	if len(v.chunks) > 5 {
		t.Fatalf("log keeps %d chunks for %d changes: dropped chunks are not released", len(v.chunks), size)
	}
	if _, _, _, err := l.since(0, 10, all); !errors.Is(err, ErrCompacted) {
		t.Fatalf("since(0) = %v, want ErrCompacted", err)
	}
	// Read everything from the compaction point in pages: every revision
	// once, in order, never split.
	from := v.compacted
	seen := 0
	for {
		out, upto, more, err := l.since(from, 100, all)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range out {
			if c.Revision <= from || (i > 0 && c.Revision < out[i-1].Revision) {
				t.Fatalf("change %v out of order after %d", c.Revision, from)
			}
		}
		if len(out) > 0 && out[len(out)-1].Revision != upto && more {
			t.Fatalf("page ends at %d but reports %d", out[len(out)-1].Revision, upto)
		}
		if more && len(out) > 100+2 {
			t.Fatalf("page of %d changes for a limit of 100", len(out))
		}
		seen += len(out)
		from = upto
		if !more {
			break
		}
	}
	// The oldest kept revision may be cut in two by compaction; its kept
	// part is before the compaction point and never answered.
	reachable := 0
	for pos := v.start; pos < v.end; pos++ {
		if v.at(pos).Revision > v.compacted {
			reachable++
		}
	}
	if seen != reachable || reachable < size-2 || from != rev {
		t.Fatalf("paged %d changes up to %d, want %d up to %d", seen, from, reachable, rev)
	}
	// A kind filter skips others but still reports how far it read.
	out, upto, more, err := l.since(v.compacted, 1000000, newKindSet([]store.Kind{store.Config}))
	if err != nil || len(out) != 0 || upto != rev || more {
		t.Fatalf("config changes: %d, up to %d, more %v, err %v; want none up to %d", len(out), upto, more, err, rev)
	}
}

func testInstance(id, svc string, md map[string]string) *instance.Instance {
	return &instance.Instance{ID: id, Namespace: "default", Service: svc, Host: "h", Port: 1, Metadata: label.FromMap(md), Healthy: true}
}

func putOp(in *instance.Instance, encoded bool) store.Op {
	op := store.Op{Kind: store.Instances, Key: in.ID, Value: in.AppendBinary(nil)}
	if !encoded {
		op.Object = in
	}
	return op
}

// TestApplyStoreChanges: changes from the store become catalog changes with
// their groups: a decoded record (another writer's) and an adopted object
// (this writer's) alike, a move between services is a delete plus an
// upsert, a delete carries the group it had, and ops on unknown records
// are nothing.
func TestApplyStoreChanges(t *testing.T) {
	c := newCatalog(Options{})
	a := testInstance("a", "s1", map[string]string{"zone": "z1"})
	b := testInstance("b", "s1", nil)
	err := c.Apply([]store.Change{
		{Revision: 1, Ops: []store.Op{putOp(a, false), putOp(b, true)}},
		{Revision: 2, Ops: []store.Op{putOp(testInstance("a", "s2", nil), true), {Kind: store.Instances, Key: "b"}, {Kind: store.Instances, Key: "never"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Revision != 1 {
		t.Fatalf("adopted object at revision %d, want 1", a.Revision)
	}
	checkChanges(t, c, 2, "[1 default/s1 a true 1 default/s1 b true 2 default/s1 a false 2 default/s2 a true 2 default/s1 b false]")
	inst := c.instancesTable()
	if inst.Len() != 1 || inst.Get("a").Service != "s2" || inst.Lookup(naming.ServiceKey{Namespace: "default", Name: "s1"}).Len() != 0 ||
		inst.Lookup(naming.ServiceKey{Namespace: "default", Name: "s1"}).Revision != 2 || c.Revision() != 2 {
		t.Fatalf("state after apply: %d instances, a=%+v", inst.Len(), inst.Get("a"))
	}
}

// TestApplyIsAtomic: a corrupt record or an unknown kind fails the whole
// call and changes nothing.
func TestApplyIsAtomic(t *testing.T) {
	c := newCatalog(Options{})
	good := putOp(testInstance("a", "s", nil), true)
	for name, bad := range map[string]store.Op{
		"corrupt":      {Kind: store.Instances, Key: "b", Value: []byte{1, 200}},
		"wrong key":    {Kind: store.Instances, Key: "b", Value: testInstance("x", "s", nil).AppendBinary(nil)},
		"unknown kind": {Kind: store.Nodes, Key: "n", Value: []byte("x")},
	} {
		err := c.Apply([]store.Change{{Revision: 1, Ops: []store.Op{good}}, {Revision: 2, Ops: []store.Op{bad}}})
		if err == nil {
			t.Fatalf("%s: applied", name)
		}
		if c.Revision() != 0 || c.instancesTable().Len() != 0 {
			t.Fatalf("%s: half applied: revision %d, %d instances", name, c.Revision(), c.instancesTable().Len())
		}
	}
}

// TestWaitWakesOnItsGroupOnly: a waiter wakes on a change of its service,
// not of another, and answers the current version on timeout.
func TestWaitWakesOnItsGroupOnly(t *testing.T) {
	c := newCatalog(Options{})
	inst := c.instancesTable()
	k := naming.ServiceKey{Namespace: "default", Name: "s"}
	res := make(chan *Group[*instance.Instance], 1)
	go func() { res <- inst.Wait(context.Background(), k, 0) }()
	waitFor(t, func() bool { return c.Waiters() == 1 })
	if err := c.Apply([]store.Change{{Revision: 1, Ops: []store.Op{putOp(testInstance("o", "other", nil), false)}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-res:
		t.Fatalf("woke on another service's change: %v", s)
	case <-time.After(20 * time.Millisecond):
	}
	if err := c.Apply([]store.Change{{Revision: 2, Ops: []store.Op{putOp(testInstance("a", "s", nil), false)}}}); err != nil {
		t.Fatal(err)
	}
	if s := <-res; s == nil || s.Revision != 2 || s.Len() != 1 {
		t.Fatalf("woke with %+v", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if s := inst.Wait(ctx, k, 2); s == nil || s.Revision != 2 {
		t.Fatalf("timed-out wait answered %+v, want the current version", s)
	}
	if c.Waiters() != 0 {
		t.Fatalf("%d waiters left", c.Waiters())
	}
}

// TestSubscribe: a subscription yields every change of its kinds in order,
// waits for the next, is never waited for by the writer, and one that falls
// behind the log's history gets ErrCompacted.
func TestSubscribe(t *testing.T) {
	c := newCatalog(Options{LogSize: 8})
	sub, err := c.Subscribe(0, store.Instances)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan []Change, 1)
	go func() {
		chs, _ := sub.Next(ctx, 100)
		got <- chs
	}()
	select {
	case chs := <-got:
		t.Fatalf("Next returned %v before any change", chs)
	case <-time.After(20 * time.Millisecond):
	}
	if err := c.Apply([]store.Change{{Revision: 1, Ops: []store.Op{putOp(testInstance("a", "s", nil), false)}}}); err != nil {
		t.Fatal(err)
	}
	if chs := <-got; len(chs) != 1 || chs[0].ID != "a" || sub.Revision() != 1 {
		t.Fatalf("first Next = %v at %d", chs, sub.Revision())
	}
	// The writer goes on while nobody reads; the subscriber then catches
	// up from the log, in order, until it falls beyond it.
	for rev := int64(2); rev <= 7; rev++ {
		if err := c.Apply([]store.Change{{Revision: rev, Ops: []store.Op{putOp(testInstance(fmt.Sprint("i", rev), "s", nil), false)}}}); err != nil {
			t.Fatal(err)
		}
	}
	chs, err := sub.Next(ctx, 2)
	if err != nil || len(chs) != 2 || chs[0].Revision != 2 || chs[1].Revision != 3 {
		t.Fatalf("catch-up Next = %v, %v", chs, err)
	}
	for rev := int64(8); rev <= 20; rev++ {
		if err := c.Apply([]store.Change{{Revision: rev, Ops: []store.Op{putOp(testInstance(fmt.Sprint("i", rev), "s", nil), false)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sub.Next(ctx, 100); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Next far behind = %v, want ErrCompacted", err)
	}
	if _, err := c.Subscribe(0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Subscribe(0) after compaction = %v, want ErrCompacted", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWaitersForgetGroupsNobodyWaitsOn: blocking reads of groups that never
// change (any name a client sends) leave nothing behind once they end, so
// the waiter table is bounded by what is being waited on now.
func TestWaitersForgetGroupsNobodyWaitsOn(t *testing.T) {
	c := newCatalog(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 1000 {
		g := naming.ServiceKey{Namespace: "default", Name: fmt.Sprintf("nobody-%d", i)}
		if c.WaitGroup(ctx, store.Instances, g, func() bool { return false }) {
			t.Fatal("ready on a group that never changes")
		}
		if !c.WaitGroup(ctx, store.Instances, g, func() bool { return true }) {
			t.Fatal("not ready on a ready group")
		}
	}
	// One waiter still waiting keeps its group; its end removes it.
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WaitGroup(wctx, store.Instances, naming.ServiceKey{Namespace: "default", Name: "waited"}, func() bool { return false })
	}()
	for deadline := time.Now().Add(10 * time.Second); c.Waiters() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never started")
		}
	}
	stop()
	<-done
	c.waiters.mu.Lock()
	n := len(c.waiters.m)
	c.waiters.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d groups still in the waiter table after every wait ended", n)
	}
}

// TestApplyAbsentThenChanged: records the writer created as absent, then
// moved and deleted later in the same call, keep their groups: the lookup
// of earlier ops is built only when a later op needs it.
func TestApplyAbsentThenChanged(t *testing.T) {
	c := newCatalog(Options{})
	created := func(in *instance.Instance) store.Op { op := putOp(in, false); op.Absent = true; return op }
	err := c.Apply([]store.Change{
		{Revision: 1, Ops: []store.Op{created(testInstance("a", "s1", nil)), created(testInstance("b", "s1", nil))}},
		{Revision: 2, Ops: []store.Op{putOp(testInstance("a", "s2", nil), false)}},
		{Revision: 3, Ops: []store.Op{{Kind: store.Instances, Key: "b"}, {Kind: store.Instances, Key: "a"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, c, 3, "[1 default/s1 a true 1 default/s1 b true 2 default/s1 a false 2 default/s2 a true 3 default/s1 b false 3 default/s2 a false]")
	if n := c.instancesTable().Len(); n != 0 {
		t.Fatalf("%d instances left", n)
	}
}

// checkChanges compares the catalog's change log, one "revision group id
// has-value" per change, with want, and its last revision with upto.
func checkChanges(t *testing.T, c *Catalog, upto int64, want string) {
	t.Helper()
	got, last, _, err := c.Changes(0, 100)
	if err != nil || last != upto {
		t.Fatalf("changes up to %d (%v), want %d", last, err, upto)
	}
	var lines []string
	for _, ch := range got {
		lines = append(lines, fmt.Sprintf("%d %v %s %v", ch.Revision, ch.Key, ch.ID, ch.Value != nil))
	}
	if fmt.Sprint(lines) != want {
		t.Fatalf("changes\n%v\nwant\n%v", lines, want)
	}
}
