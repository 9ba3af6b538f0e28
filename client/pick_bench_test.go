package client

import (
	"fmt"
	"testing"
	"time"
)

// staticView is a View whose one service is fed a fixed state, with no
// server and no watch goroutine: what Pick costs, alone.
func staticView(tb testing.TB, opts ViewOptions, name string, ins []Instance) *View {
	tb.Helper()
	c, err := New("http://127.0.0.1:1")
	if err != nil {
		tb.Fatal(err)
	}
	v, err := c.NewView(opts)
	if err != nil {
		tb.Fatal(err)
	}
	key, _, _, err := v.key(name)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := newService(v, key, v.def)
	if err != nil {
		tb.Fatal(err)
	}
	m := map[string]*service{key: s, name: s}
	v.services.Store(&m)
	s.apply(QueryResult{Revision: 1, Instances: ins})
	return v
}

// benchInstances: n healthy instances with zone (10 values) and version (4
// values) metadata, plus 6 other entries: a 2-key match names n/40 of them.
func benchInstances(n int) []Instance {
	ins := make([]Instance, n)
	for i := range ins {
		ins[i] = Instance{
			ID: fmt.Sprintf("i-%05d", i), Namespace: "default", Service: "orders",
			Host: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 8080, Healthy: true, Revision: 1,
			Metadata: map[string]string{
				"zone": fmt.Sprintf("z%d", i%10), "version": fmt.Sprintf("v%d", i%4),
				"env": "prod", "team": "payments", "region": "eu", "arch": "amd64", "os": "linux", "tier": "web",
			},
		}
	}
	return ins
}

var benchSubsets = SubsetConfig{Selectors: []SubsetSelector{
	{Keys: []string{"zone", "version"}}, {Keys: []string{"zone"}}, {Keys: []string{"version"}},
}}

// BenchmarkPick: one pick and its report on a 1,000-instance service.
func BenchmarkPick(b *testing.B) {
	ins := benchInstances(1000)
	match := map[string]string{"zone": "z3", "version": "v3"}
	for _, policy := range []string{PolicyRoundRobin, PolicyLeastRequest, PolicyPeakEWMA, PolicyAdaptive} {
		v := staticView(b, ViewOptions{Policy: policy, Subsets: benchSubsets}, "orders", ins)
		for _, c := range []struct {
			name string
			opts PickOptions
		}{
			{"match2", PickOptions{Match: match}},
			{"selector", PickOptions{Selector: "zone=z3,version=v3"}},
			{"all", PickOptions{}},
		} {
			b.Run("policy="+policy+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p, err := v.Pick("orders", c.opts)
					if err != nil {
						b.Fatal(err)
					}
					p.Report(time.Millisecond, OutcomeSuccess)
				}
			})
			pp, err := v.Prepare("orders", c.opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Run("policy="+policy+"/"+c.name+"/prepared", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p, err := pp.Pick()
					if err != nil {
						b.Fatal(err)
					}
					p.Report(time.Millisecond, OutcomeSuccess)
				}
			})
		}
	}
}

// BenchmarkPickParallel: picks from both cores at once (lock-free reads).
func BenchmarkPickParallel(b *testing.B) {
	v := staticView(b, ViewOptions{Policy: PolicyAdaptive, Subsets: benchSubsets}, "orders", benchInstances(1000))
	match := map[string]string{"zone": "z3", "version": "v3"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := v.Pick("orders", PickOptions{Match: match})
			if err != nil {
				b.Error(err)
				return
			}
			p.Report(time.Millisecond, OutcomeSuccess)
		}
	})
}

func TestPickAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count only")
	}
	v := staticView(t, ViewOptions{Policy: PolicyAdaptive, Subsets: benchSubsets}, "orders", benchInstances(1000))
	for _, opts := range []PickOptions{{Match: map[string]string{"zone": "z3", "version": "v3"}}, {Selector: "zone=z3"}, {}} {
		pick := func() {
			p, err := v.Pick("orders", opts)
			if err != nil {
				t.Fatal(err)
			}
			if p.Instance.Metadata["zone"] != "z3" && len(opts.Match)+len(opts.Selector) > 0 {
				t.Fatalf("picked %s for %+v", p.Instance.ID, opts)
			}
			p.Report(time.Millisecond, OutcomeSuccess)
		}
		pick() // builds the picker (cold path)
		if n := testing.AllocsPerRun(200, pick); n != 0 {
			t.Errorf("%+v: %v allocations per pick, want 0", opts, n)
		}
		pp, err := v.Prepare("orders", opts)
		if err != nil {
			t.Fatal(err)
		}
		prepared := func() {
			p, err := pp.Pick()
			if err != nil {
				t.Fatal(err)
			}
			if p.Instance.Metadata["zone"] != "z3" && len(opts.Match)+len(opts.Selector) > 0 {
				t.Fatalf("prepared picked %s for %+v", p.Instance.ID, opts)
			}
			p.Report(time.Millisecond, OutcomeSuccess)
		}
		if n := testing.AllocsPerRun(200, prepared); n != 0 {
			t.Errorf("%+v: %v allocations per prepared pick, want 0", opts, n)
		}
	}
}
