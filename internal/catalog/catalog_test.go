package catalog

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// The catalog's tests use instances as their items, in an instance table
// registered as the registry registers it (registry.New), since the
// catalog knows no kind of its own.

// newCatalog is New with an instance table.
func newCatalog(opts Options) *Catalog {
	c := New(opts)
	c.Register(store.Instances, NewGroups(Codec[*instance.Instance]{
		Decode: func(rec store.Record) (*instance.Instance, error) { return instance.Decode(rec.Value, rec.Revision) },
		Adopt: func(obj any, rev int64) (*instance.Instance, error) {
			in := obj.(*instance.Instance)
			in.Revision = rev
			return in, nil
		},
		Loaded: func(in *instance.Instance) bool {
			was := in.Healthy
			in.Healthy = true
			return !was
		},
	}))
	return c
}

// instancesTable is c's instance table.
func (c *Catalog) instancesTable() *Groups[*instance.Instance] {
	return c.tables[store.Instances].(*Groups[*instance.Instance])
}

// loadInstances loads instances at rev as a store load would.
func loadInstances(c *Catalog, rev int64, all []*instance.Instance) {
	vals := make([]any, len(all))
	for i, in := range all {
		vals[i] = in
	}
	c.instancesTable().Load(rev, vals)
	c.rev.Store(rev)
	c.log.reset(rev)
}

// model is the brute-force reference: the instances by id.
type model map[string]*instance.Instance

func (m model) selectService(k naming.ServiceKey, sel label.Selector, healthyOnly bool) []string {
	var out []string
	for _, in := range m {
		if in.Key() != k || (healthyOnly && (!in.Healthy || in.Isolated)) || !sel.Matches(in.Metadata) {
			continue
		}
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}

func idsOf(ins []*instance.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	return out
}

// TestSelectAgainstReference applies random batches (upserts, relabels,
// moves between services, deletes, health flips) and checks every query of
// every version against brute force, including versions already replaced.
func TestSelectAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := []string{"zone", "env", "ver"}
	vals := []string{"a", "b", "c"}
	services := []naming.ServiceKey{{Namespace: "default", Name: "s0"}, {Namespace: "default", Name: "s1"}, {Namespace: "other", Name: "s0"}}
	randMeta := func() map[string]string {
		m := map[string]string{}
		for _, k := range keys {
			if rng.IntN(3) > 0 {
				m[k] = vals[rng.IntN(len(vals))]
			}
		}
		return m
	}
	randSel := func() label.Selector {
		var s label.Selector
		for range rng.IntN(3) {
			k := keys[rng.IntN(len(keys))]
			switch op := label.Op(rng.IntN(6) + 1); op {
			case label.Equals, label.NotEquals:
				s = append(s, label.Requirement{Key: k, Op: op, Values: []string{vals[rng.IntN(3)]}})
			case label.In, label.NotIn:
				s = append(s, label.Requirement{Key: k, Op: op, Values: []string{"a", vals[1+rng.IntN(2)]}})
			default:
				s = append(s, label.Requirement{Key: k, Op: op})
			}
		}
		return s
	}
	type past struct {
		svc  *Group[*instance.Instance]
		sel  label.Selector
		hlth bool
		want []string
	}
	var history []past
	c := newCatalog(Options{})
	m := model{}
	rev := int64(0)
	for round := range 300 {
		var changes []Change
		touched := map[string]bool{}
		for range 1 + rng.IntN(30) {
			id := fmt.Sprintf("i%03d", rng.IntN(400))
			if touched[id] {
				continue // one change per id per batch, as the registry sends
			}
			touched[id] = true
			rev++
			cur := m[id]
			switch r := rng.IntN(10); {
			case r < 2 && cur != nil:
				changes = append(changes, Change{Revision: rev, Kind: store.Instances, Key: cur.Key(), ID: id})
				delete(m, id)
			case r < 4 && cur != nil:
				n := cur.Clone()
				n.Healthy = !cur.Healthy
				n.Revision = rev
				changes = append(changes, Change{Revision: rev, Kind: store.Instances, Key: n.Key(), ID: id, Value: n})
				m[id] = n
			default:
				k := services[rng.IntN(len(services))]
				n := &instance.Instance{ID: id, Namespace: k.Namespace, Service: k.Name, Host: "h", Port: 1, Metadata: label.FromMap(randMeta()),
					Healthy: rng.IntN(5) > 0, Isolated: rng.IntN(8) == 0, Revision: rev}
				if cur != nil && cur.Key() != k {
					changes = append(changes, Change{Revision: rev, Kind: store.Instances, Key: cur.Key(), ID: id})
				}
				changes = append(changes, Change{Revision: rev, Kind: store.Instances, Key: k, ID: id, Value: n})
				m[id] = n
			}
		}
		c.applyChanges(rev, changes)
		if c.instancesTable().Len() != len(m) {
			t.Fatalf("round %d: Len %d, model %d", round, c.instancesTable().Len(), len(m))
		}
		for _, k := range services {
			svc := c.instancesTable().Lookup(k)
			if svc == nil {
				continue
			}
			if got, want := idsOf(svc.Items()), m.selectService(k, nil, false); !slices.Equal(got, want) {
				t.Fatalf("round %d %v: instances %v, want %v", round, k, got, want)
			}
			for id, in := range m {
				if got, ok := svc.Get(id); (in.Key() == k) != ok || ok && got != in {
					t.Fatalf("round %d %v: Get(%s) = %v, %v; model %v", round, k, id, got, ok, in)
				}
			}
			for range 8 {
				sel, hlth := randSel(), rng.IntN(2) == 0
				want := m.selectService(k, sel, hlth)
				if got := idsOf(svc.Select(sel, hlth)); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("round %d %v: Select(%q, healthy=%v) = %v, want %v", round, k, sel.String(), hlth, got, want)
				}
				if rng.IntN(10) == 0 {
					history = append(history, past{svc, sel, hlth, want})
				}
			}
		}
		for id, in := range m {
			if got := c.instancesTable().Get(id); got != in {
				t.Fatalf("round %d: Get(%s) = %v, want %v", round, id, got, in)
			}
		}
	}
	// Versions already replaced still answer as they did.
	for i, p := range history {
		if got := idsOf(p.svc.Select(p.sel, p.hlth)); !slices.Equal(got, p.want) && !(len(got) == 0 && len(p.want) == 0) {
			t.Fatalf("old version %d moved: Select(%q) = %v, want %v", i, p.sel.String(), got, p.want)
		}
	}
}

func benchInstance(i int, svc string) *instance.Instance {
	md := make(map[string]string, 16)
	for j := 1; j <= 16; j++ {
		md[fmt.Sprintf("meta-key%02d", j)] = fmt.Sprintf("v%02d-%06d", j, i%(1<<j))
	}
	return &instance.Instance{ID: fmt.Sprintf("id-%08d", i), Namespace: "default", Service: svc, Host: "10.0.0.1", Port: 8080,
		Weight: 100, Metadata: label.FromMap(md), Healthy: true}
}

// BenchmarkApply: one commit of one new instance into a service of n.
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{100, 10000, 100000} {
		b.Run(fmt.Sprintf("service=%d", n), func(b *testing.B) {
			c := newCatalog(Options{})
			var all []*instance.Instance
			for i := range n {
				all = append(all, benchInstance(i, "s"))
			}
			loadInstances(c, 1, all)
			rev := int64(1)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				rev++
				in := benchInstance(n+i, "s")
				if err := c.Apply([]store.Change{{Revision: rev, Ops: []store.Op{{Kind: store.Instances, Key: in.ID, Value: []byte{}, Object: in}}}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyAmong: one commit of one new instance whose id sorts among
// the service's n (the register bench's shape: several loaders' id families
// interleave in one service), spread over the service.
func BenchmarkApplyAmong(b *testing.B) {
	for _, n := range []int{4000, 100000} {
		b.Run(fmt.Sprintf("service=%d", n), func(b *testing.B) {
			c := newCatalog(Options{})
			all := make([]*instance.Instance, n)
			for i := range all {
				all[i] = benchInstance(i, "s")
				all[i].ID = fmt.Sprintf("id-%09d", 2*i)
			}
			loadInstances(c, 1, all)
			rev := int64(1)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				rev++
				in := benchInstance(i, "s")
				in.ID = fmt.Sprintf("id-%09d-%d", 2*((i*7919)%n)+1, i)
				if err := c.Apply([]store.Change{{Revision: rev, Ops: []store.Op{{Kind: store.Instances, Key: in.ID, Value: []byte{}, Object: in}}}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSelect: a 2-term selector over a service of 100 instances.
func BenchmarkSelect(b *testing.B) {
	c := newCatalog(Options{})
	var all []*instance.Instance
	for i := range 100 {
		all = append(all, benchInstance(i, "s"))
	}
	loadInstances(c, 1, all)
	svc := c.instancesTable().Lookup(naming.ServiceKey{Namespace: "default", Name: "s"})
	sel, _ := label.Parse("meta-key01=v01-000001,meta-key02!=x")
	b.ReportAllocs()
	for b.Loop() {
		if len(svc.Select(sel, true)) != 50 {
			b.Fatal("wrong answer")
		}
	}
}

// BenchmarkApplyBatch: commits of 1,000 new instances into a service that
// starts at 200,000 and grows, the shape of `sextant bench registry`'s batch
// scenario (metadata of each instance by its place in a 500-instance body,
// so the high-cardinality keys have 500 values). Reported per instance.
func BenchmarkApplyBatch(b *testing.B) {
	const start, per = 200_000, 1000
	mk := func(i int) *instance.Instance {
		in := benchInstance(i%500, "s")
		in.ID = fmt.Sprintf("id-%09d", i)
		return in
	}
	c := newCatalog(Options{})
	all := make([]*instance.Instance, start)
	for i := range all {
		all[i] = mk(i)
	}
	loadInstances(c, 1, all)
	rev, next := int64(1), start
	ops := make([]store.Op, per)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for k := range ops {
			in := mk(next)
			next++
			ops[k] = store.Op{Kind: store.Instances, Key: in.ID, Value: []byte{}, Object: in}
		}
		rev++
		b.StartTimer()
		if err := c.Apply([]store.Change{{Revision: rev, Ops: ops}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per), "ns/instance")
}

// TestLargeSetVersions grows one service past alignFrom in commits that
// mostly add instances (their slots past the end, so the label index shares
// and appends its arrays), with label changes, health flips and removals
// (slots reused) mixed in, and checks that every version, old ones
// included, still answers as the reference did when it was current. Folds
// (the index compacted beside the writer) run on goroutines as in
// production, at once on the writer's goroutine, and at chosen points:
// finished some commits after they started, or run by the edit that
// reaches the bound before they ran.
func TestLargeSetVersions(t *testing.T) {
	t.Run("goroutines", func(t *testing.T) { largeSetVersions(t, nil) })
	t.Run("inline", func(t *testing.T) {
		defer swapGoFold(func(f folder) { f.run() })()
		largeSetVersions(t, nil)
	})
	t.Run("deferred", func(t *testing.T) {
		var queued []folder
		defer swapGoFold(func(f folder) { queued = append(queued, f) })()
		rng := rand.New(rand.NewPCG(7, 8))
		late, forced := 0, 0
		largeSetVersions(t, func() {
			if len(queued) == 0 || rng.IntN(10) > 0 {
				return
			}
			for _, f := range queued {
				if f.finished() {
					forced++ // an edit reached twice the bound and ran it
				} else {
					f.run()
					late++
				}
			}
			queued = queued[:0]
		})
		if late < 3 || forced < 2 {
			t.Fatalf("%d folds run late, %d by an edit: the test no longer covers both", late, forced)
		}
	})
}

func swapGoFold(f func(folder)) (restore func()) {
	old := goFold
	goFold = f
	return func() { goFold = old }
}

// largeSetVersions is TestLargeSetVersions; between (if not nil) is called
// after each commit.
func largeSetVersions(t *testing.T, between func()) {
	rng := rand.New(rand.NewPCG(5, 6))
	k := naming.ServiceKey{Namespace: "default", Name: "big"}
	meta := func() label.Labels {
		return label.FromMap(map[string]string{
			"zone": fmt.Sprint("z", rng.IntN(3)),    // dense
			"rack": fmt.Sprint("r", rng.IntN(40)),   // lists that may turn dense
			"pod":  fmt.Sprint("p", rng.IntN(5000)), // rare values
			"odd":  map[bool]string{true: "y", false: "n"}[rng.IntN(7) == 0],
		})
	}
	sels := []string{"zone=z1", "zone=z2,rack in (r1,r2,r3)", "odd=y,zone!=z0", "pod=p7", "rack=r5,!missing"}
	type past struct {
		svc  *Group[*instance.Instance]
		sel  int
		want []string
	}
	var history []past
	c := newCatalog(Options{})
	m := model{}
	var ids []string
	// Loaded first, to a size off a 64-slot word: the index holds the
	// slots of the last, partial word, which compaction leaves dirty.
	var loaded []*instance.Instance
	for i := range alignFrom + 37 {
		in := &instance.Instance{ID: fmt.Sprintf("i%07d", i), Namespace: k.Namespace, Service: k.Name, Host: "h", Port: 1, Metadata: meta(), Healthy: true, Revision: 1}
		loaded = append(loaded, in)
		m[in.ID] = in
		ids = append(ids, in.ID)
	}
	loadInstances(c, 1, slices.Clone(loaded))
	rev, next := int64(1), len(loaded)
	for c.instancesTable().Len() < 3*alignFrom {
		rev++
		var changes []Change
		touched := map[string]bool{}
		for range 1 + rng.IntN(300) {
			r := rng.IntN(20)
			var id string
			switch {
			case r < 15 && rev > 40: // the first commits only change loaded instances
				id = fmt.Sprintf("i%07d", next)
				next++
				ids = append(ids, id)
			case r < 17 || (rev <= 40 && r%2 == 0):
				id = ids[len(ids)-1-rng.IntN(min(len(ids), 100))] // recent slots, near the cut
			default:
				id = ids[rng.IntN(len(ids))]
			}
			if touched[id] {
				continue
			}
			touched[id] = true
			cur := m[id]
			switch {
			case r == 19 && cur != nil && rev > 40:
				changes = append(changes, Change{Revision: rev, Kind: store.Instances, Key: k, ID: id})
				delete(m, id)
			case r == 18 && cur != nil:
				n := cur.Clone()
				n.Healthy, n.Revision = !cur.Healthy, rev
				changes = append(changes, Change{Revision: rev, Kind: store.Instances, Key: k, ID: id, Value: n})
				m[id] = n
			default:
				n := &instance.Instance{ID: id, Namespace: k.Namespace, Service: k.Name, Host: "h", Port: 1, Metadata: meta(),
					Healthy: rng.IntN(6) > 0, Revision: rev}
				changes = append(changes, Change{Revision: rev, Kind: store.Instances, Key: k, ID: id, Value: n})
				m[id] = n
			}
		}
		c.applyChanges(rev, changes)
		if between != nil {
			between()
		}
		svc := c.instancesTable().Lookup(k)
		i := rng.IntN(len(sels))
		sel, err := label.Parse(sels[i])
		if err != nil {
			t.Fatal(err)
		}
		want := m.selectService(k, sel, true)
		if got := idsOf(svc.Select(sel, true)); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("revision %d: Select(%q) = %d ids, want %d", rev, sels[i], len(got), len(want))
		}
		history = append(history, past{svc, i, want})
	}
	for _, p := range history {
		sel, _ := label.Parse(sels[p.sel])
		if got := idsOf(p.svc.Select(sel, true)); !slices.Equal(got, p.want) && !(len(got) == 0 && len(p.want) == 0) {
			t.Fatalf("revision %d moved: Select(%q) = %d ids, want %d", p.svc.Revision, sels[p.sel], len(got), len(p.want))
		}
	}
}

// TestSetEditedTwice: two edits of one version (which the catalog never
// makes, but Set allows) each append ids; neither disturbs the other.
func TestSetEditedTwice(t *testing.T) {
	var items []*instance.Instance
	for i := range 100 {
		items = append(items, benchInstance(i, "s"))
	}
	base := buildSet(items)
	grow := func(from, n int) (Set[*instance.Instance], []string) {
		e := base.edit()
		for i := from; i < from+n; i++ {
			e.upsert(benchInstance(i, "s"))
		}
		s := e.finish()
		return s, idsOf(s.Items())
	}
	base, _ = grow(100, 1) // id order now has room to append in place
	grow = func(from, n int) (Set[*instance.Instance], []string) {
		e := base.edit()
		for i := from + n - 1; i >= from; i-- { // slots in reverse id order
			e.upsert(benchInstance(i, "s"))
		}
		s := e.finish()
		return s, idsOf(s.Items())
	}
	a, wantA := grow(101, 10)
	b, wantB := grow(200, 3)
	if got := idsOf(a.Items()); !slices.Equal(got, wantA) {
		t.Fatalf("first edit changed by the second: %v, want %v", got[100:], wantA[100:])
	}
	if got := idsOf(b.Items()); !slices.Equal(got, wantB) || len(got) != 104 {
		t.Fatalf("second edit: %v", got[100:])
	}
}

// TestAddedAndRemovedInOneEdit: ids added and removed again within one
// apply leave id order as it was (the append path once indexed an empty
// list of new ids).
func TestAddedAndRemovedInOneEdit(t *testing.T) {
	c := newCatalog(Options{})
	loadInstances(c, 1, []*instance.Instance{benchInstance(1, "s")})
	in := benchInstance(2, "s")
	k := in.Key()
	c.applyChanges(2, []Change{
		{Revision: 2, Kind: store.Instances, Key: k, ID: in.ID, Value: in, Created: true},
		{Revision: 2, Kind: store.Instances, Key: k, ID: in.ID},
	})
	svc := c.instancesTable().Lookup(k)
	if got := idsOf(svc.Items()); len(got) != 1 || got[0] != benchInstance(1, "s").ID || c.instancesTable().Len() != 1 {
		t.Fatalf("after add and remove in one apply: %v (%d)", got, c.instancesTable().Len())
	}
}
