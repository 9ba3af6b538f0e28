package subset

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
)

func testPolicy() balancer.Policy { return balancer.NewRoundRobin() }

// envoyHosts is the example of Envoy's subset load balancer documentation.
func envoyHosts() []Host {
	mk := func(id, stage, version, typ string, xlarge bool) Host {
		m := map[string]string{"stage": stage, "version": version, "type": typ}
		if xlarge {
			m["xlarge"] = "true"
		}
		return Host{ID: id, Addr: id + ":80", Weight: 1, Labels: label.FromMap(m)}
	}
	return []Host{
		mk("e1", "prod", "1.0", "std", true),
		mk("e2", "prod", "1.0", "std", false),
		mk("e3", "prod", "1.1", "std", false),
		mk("e4", "prod", "1.1", "std", false),
		mk("e5", "prod", "1.0", "bigmem", false),
		mk("e6", "prod", "1.1", "bigmem", false),
		mk("e7", "dev", "1.2-pre", "std", false),
	}
}

// pickAll picks n times and returns the distinct host IDs, sorted.
func pickAll(t *testing.T, lb *LB, md map[string]string, n int) ([]string, error) {
	t.Helper()
	seen := map[string]bool{}
	for range n {
		r, err := lb.Pick(md)
		if err != nil {
			return nil, err
		}
		r.Done(time.Millisecond, balancer.Success)
		seen[r.Host.ID] = true
	}
	var ids []string
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

func TestSelection(t *testing.T) {
	envoy := Config{
		FallbackPolicy: DefaultSubset,
		DefaultSubset:  map[string]string{"stage": "prod", "version": "1.0", "type": "std"},
		Selectors: []Selector{
			{Keys: []string{"stage", "type"}},
			{Keys: []string{"stage", "version"}},
			{Keys: []string{"version"}},
			{Keys: []string{"xlarge", "version"}},
		},
	}
	tests := []struct {
		name    string
		cfg     Config
		md      map[string]string
		want    []string
		wantErr error
	}{
		{"exact selector", envoy, map[string]string{"stage": "prod", "version": "1.1"}, []string{"e3", "e4", "e6"}, nil},
		{"one key", envoy, map[string]string{"version": "1.0"}, []string{"e1", "e2", "e5"}, nil},
		{"keys of no selector fall back to default", envoy, map[string]string{"stage": "prod"}, []string{"e1", "e2"}, nil},
		{"no metadata falls back", envoy, nil, []string{"e1", "e2"}, nil},
		{"values no host has fall back", envoy, map[string]string{"version": "9"}, []string{"e1", "e2"}, nil},
		{"unknown key falls back", envoy, map[string]string{"version": "1.0", "color": "red"}, []string{"e1", "e2"}, nil},
		{"two keys", envoy, map[string]string{"xlarge": "true", "version": "1.0"}, []string{"e1"}, nil},
		{"no fallback", Config{Selectors: envoy.Selectors}, map[string]string{"version": "9"}, nil, ErrNoSubset},
		{"any endpoint", Config{FallbackPolicy: AnyEndpoint, Selectors: envoy.Selectors}, map[string]string{"version": "9"},
			[]string{"e1", "e2", "e3", "e4", "e5", "e6", "e7"}, nil},
		{"selector policy overrides cluster", Config{FallbackPolicy: AnyEndpoint,
			Selectors: []Selector{{Keys: []string{"version"}, FallbackPolicy: NoFallback}}},
			map[string]string{"version": "9"}, nil, ErrNoSubset},
		{"keys subset", Config{Selectors: []Selector{
			{Keys: []string{"stage", "version"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"stage"}},
			{Keys: []string{"stage"}}}},
			map[string]string{"stage": "dev", "version": "1.0"}, []string{"e7"}, nil},
		{"keys subset to a selector-less key set uses cluster policy", Config{FallbackPolicy: DefaultSubset,
			DefaultSubset: map[string]string{"type": "bigmem"},
			Selectors:     []Selector{{Keys: []string{"stage", "version"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"stage"}}}},
			map[string]string{"stage": "dev", "version": "1.0"}, []string{"e5", "e6"}, nil},
		{"empty default subset", Config{FallbackPolicy: DefaultSubset, DefaultSubset: map[string]string{"stage": "qa"}},
			map[string]string{"stage": "x"}, nil, ErrNoHealthyHost},
		{"empty default subset in panic mode", Config{FallbackPolicy: DefaultSubset, PanicModeAny: true, DefaultSubset: map[string]string{"stage": "qa"}},
			map[string]string{"stage": "x"}, []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7"}, nil},
		{"single host per subset takes the lowest slot", Config{Selectors: []Selector{{Keys: []string{"version"}, SingleHostPerSubset: true}}},
			map[string]string{"version": "1.1"}, []string{"e3"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb, err := New(tt.cfg, testPolicy(), envoyHosts())
			if err != nil {
				t.Fatal(err)
			}
			got, err := pickAll(t, lb, tt.md, 20)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Pick(%v): err %v, want %v", tt.md, err, tt.wantErr)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("Pick(%v) = %v, want %v", tt.md, got, tt.want)
			}
		})
	}
}

func TestListAsAny(t *testing.T) {
	hosts := []Host{
		{ID: "a", Lists: map[string][]string{"version": {"1", "2"}}},
		{ID: "b", Labels: label.FromMap(map[string]string{"version": "2"})},
	}
	tests := []struct {
		name      string
		listAsAny bool
		version   string
		want      []string
		wantErr   error
	}{
		{"list enters each element's subset", true, "1", []string{"a"}, nil},
		{"and shares it with scalars", true, "2", []string{"a", "b"}, nil},
		{"without list_as_any a list matches nothing", false, "1", nil, ErrNoSubset},
		{"without list_as_any scalars still match", false, "2", []string{"b"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{ListAsAny: tt.listAsAny, Selectors: []Selector{{Keys: []string{"version"}}}}
			lb, err := New(cfg, testPolicy(), hosts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pickAll(t, lb, map[string]string{"version": tt.version}, 10)
			if !errors.Is(err, tt.wantErr) || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("got %v, %v; want %v, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestInvalidHost(t *testing.T) {
	h := Host{ID: "x", Labels: label.FromMap(map[string]string{"k": "v"}), Lists: map[string][]string{"k": {"v"}}}
	_, err := New(Config{}, testPolicy(), []Host{h})
	if !errors.Is(err, ErrInvalidHost) || err.Error() != `subset: invalid host "x": key "k" is both a label and a list` {
		t.Fatalf("New: %v", err)
	}
	lb, _ := New(Config{}, testPolicy(), nil)
	if err := lb.Upsert(&h); !errors.Is(err, ErrInvalidHost) {
		t.Fatalf("Upsert: %v", err)
	}
	if err := lb.SetHealth("nope", false); !errors.Is(err, ErrUnknownHost) {
		t.Fatalf("SetHealth: %v", err)
	}
}

// TestHealthAndWeight: health and weight changes reach picks without a
// rebuild, and panic mode takes over when a subset has no healthy host.
func TestHealthAndWeight(t *testing.T) {
	cfg := Config{PanicModeAny: true, Selectors: []Selector{{Keys: []string{"version"}}}}
	lb, err := New(cfg, balancer.NewWeightedRoundRobin(), envoyHosts())
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]string{"version": "1.1"}
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"all healthy", func() error { return nil }, []string{"e3", "e4", "e6"}},
		{"one unhealthy", func() error { return lb.SetHealth("e4", false) }, []string{"e3", "e6"}},
		{"weight zero", func() error { return lb.SetWeight("e6", 0) }, []string{"e3"}},
		{"subset without healthy host panics to all", func() error { return lb.SetHealth("e3", false) }, []string{"e1", "e2", "e5", "e7"}}, // e6 has weight 0
		{"healthy again", func() error { return lb.SetHealth("e3", true) }, []string{"e3"}},
		{"weight back", func() error { return lb.SetWeight("e6", 3) }, []string{"e3", "e6"}},
	}
	before := lb.NumSubsets()
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := pickAll(t, lb, md, 30)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Fatalf("%s: got %v, %v; want %v", st.name, got, err, st.want)
		}
	}
	if lb.NumSubsets() != before {
		t.Fatalf("health changes changed the subsets: %d, want %d", lb.NumSubsets(), before)
	}
}

// TestUpdateSharesUntouchedSubsets: one host's change replaces only the
// subsets it leaves, enters or stays in.
func TestUpdateSharesUntouchedSubsets(t *testing.T) {
	cfg := Config{Selectors: []Selector{{Keys: []string{"version"}}, {Keys: []string{"stage", "type"}}}}
	lb, err := New(cfg, testPolicy(), envoyHosts())
	if err != nil {
		t.Fatal(err)
	}
	entries := func() map[string]*entry {
		m := map[string]*entry{}
		for _, sh := range lb.snap.Load().table.shards {
			for _, e := range sh {
				m[fmt.Sprint(e.sel, e.values)] = e
			}
		}
		return m
	}
	before := entries()
	// e7 moves from version 1.2-pre (it leaves, the subset empties) to 1.0.
	if err := lb.Upsert(&Host{ID: "e7", Labels: label.FromMap(map[string]string{"stage": "dev", "version": "1.0", "type": "std"})}); err != nil {
		t.Fatal(err)
	}
	after := entries()
	changed := map[string]bool{}
	for k, e := range after {
		if before[k] != e {
			changed[k] = true
		}
	}
	for k := range before {
		if after[k] == nil {
			changed[k+" (gone)"] = true
		}
	}
	want := map[string]bool{"0 [1.0]": true, "0 [1.2-pre] (gone)": true, "1 [dev std]": true}
	if fmt.Sprint(changed) != fmt.Sprint(want) {
		t.Fatalf("changed subsets %v, want %v", changed, want)
	}
}

func TestPickAllocatesNothing(t *testing.T) {
	lb, err := New(seedConfig(), testPolicy(), seedHosts(2000, 1))
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]string{"zone": "zone1", "physics": "m2"}
	if _, err := lb.Pick(md); err != nil { // builds the child picker
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		r, err := lb.Pick(md)
		if err != nil {
			t.Fatal(err)
		}
		r.Done(time.Millisecond, balancer.Success)
	})
	if allocs != 0 {
		t.Fatalf("Pick allocates %v times per call, want 0", allocs)
	}
}

// TestConcurrentPicksAndUpdates runs picks on every core while the writer
// relabels, removes, re-adds and flips health; run it with -race.
func TestConcurrentPicksAndUpdates(t *testing.T) {
	hosts := seedHosts(500, 2)
	lb, err := New(seedConfig(), testPolicy(), hosts)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var picks atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			md := []map[string]string{{"zone": "zone1"}, {"zone": "zone2", "physics": "m1"}, {"mosn_aig": "aig0", "mosn_version": "v1"}}[g%3]
			for !stop.Load() {
				r, err := lb.Pick(md)
				if err == nil {
					for k, v := range md {
						if got, _ := r.Host.Labels.Get(k); got != v {
							t.Errorf("picked %+v for %v", r.Host, md)
							return
						}
					}
					r.Done(time.Microsecond, balancer.Success)
				} else if !errors.Is(err, ErrNoSubset) && !errors.Is(err, ErrNoHealthyHost) {
					t.Errorf("Pick: %v", err)
					return
				}
				picks.Add(1)
			}
		})
	}
	// On a loaded machine the pickers may not have run yet: let at least
	// one pick happen before the writer starts (bounded).
	for deadline := time.Now().Add(10 * time.Second); picks.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	fresh := seedHosts(500, 3)
	for i := range 300 {
		id := hosts[i%len(hosts)].ID
		var err error
		switch i % 4 {
		case 0:
			h := fresh[i%len(fresh)]
			h.ID = id
			err = lb.Upsert(&h)
		case 1:
			lb.Remove(id)
		case 2:
			err = lb.Upsert(&hosts[i%len(hosts)])
		case 3:
			err = lb.SetHealth(id, i%8 == 3)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if picks.Load() == 0 {
		t.Fatal("no picks ran")
	}
}

// TestRedundantKeysManyKeys: a request naming more known keys than a
// selector may have (the stack buffer of a pick) is narrowed with
// allow_redundant_keys and falls back without it, through both Pick and
// PickRequest.
func TestRedundantKeysManyKeys(t *testing.T) {
	var big []string
	m := map[string]string{}
	for i := range 20 {
		k := fmt.Sprintf("k%02d", i)
		if i < MaxSelectorKeys {
			big = append(big, k)
		}
		m[k] = "v"
	}
	hosts := []Host{{ID: "a", Labels: label.FromMap(m)}, {ID: "b", Labels: label.FromMap(map[string]string{"k16": "v", "k17": "v"})}}
	for _, redundant := range []bool{false, true} {
		cfg := Config{AllowRedundantKeys: redundant, Selectors: []Selector{{Keys: big}, {Keys: []string{"k16", "k17"}}}}
		lb, err := New(cfg, testPolicy(), hosts)
		if err != nil {
			t.Fatal(err)
		}
		want, wantErr := []string{"a"}, error(nil)
		if !redundant {
			want, wantErr = nil, ErrNoSubset
		}
		got, err := pickAll(t, lb, m, 4)
		if !errors.Is(err, wantErr) || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("redundant=%v: Pick(20 keys) = %v, %v; want %v, %v", redundant, got, err, want, wantErr)
		}
		r, err := lb.PickRequest(&Request{Metadata: label.FromMap(m)})
		if !errors.Is(err, wantErr) || (err == nil && r.Host.ID != "a") {
			t.Fatalf("redundant=%v: PickRequest(20 keys) = %+v, %v; want %v, %v", redundant, r.Host, err, want, wantErr)
		}
	}
}

func TestPickRequestAllocatesNothing(t *testing.T) {
	cfg := seedConfig()
	cfg.MetadataFallbackPolicy = FallbackList
	cfg.AllowRedundantKeys = true
	lb, err := New(cfg, testPolicy(), seedHosts(2000, 1))
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*Request{
		{Metadata: label.FromMap(map[string]string{"zone": "zone1", "physics": "m2"})},
		{Metadata: label.FromMap(map[string]string{"zone": "zone1", "redundant": "x"}),
			FallbackList: []label.Labels{label.FromMap(map[string]string{"physics": "none"}), label.FromMap(map[string]string{"physics": "m1"})}},
	}
	for _, req := range reqs {
		if _, err := lb.PickRequest(req); err != nil { // builds the child picker
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			r, err := lb.PickRequest(req)
			if err != nil {
				t.Fatal(err)
			}
			r.Done(time.Millisecond, balancer.Success)
		})
		if allocs != 0 {
			t.Fatalf("PickRequest(%v) allocates %v times per call, want 0", req.Metadata.Map(), allocs)
		}
	}
}

// TestSingleHostKeepsEarliest: a single_host_per_subset subset stays with
// the host that joined first when a duplicate joins, even one that takes a
// lower (freed) slot, so sticky traffic does not move.
func TestSingleHostKeepsEarliest(t *testing.T) {
	hosts := []Host{
		{ID: "a", Labels: label.FromMap(map[string]string{"host": "y"})},
		{ID: "b", Labels: label.FromMap(map[string]string{"host": "x"})},
	}
	lb, err := New(Config{Selectors: []Selector{{Keys: []string{"host"}, SingleHostPerSubset: true}}}, testPolicy(), hosts)
	if err != nil {
		t.Fatal(err)
	}
	lb.Remove("a") // frees slot 0
	if err := lb.Upsert(&Host{ID: "c", Labels: label.FromMap(map[string]string{"host": "x"})}); err != nil {
		t.Fatal(err)
	}
	if slotOf := lb.ids["c"]; slotOf != 0 {
		t.Fatalf("c took slot %d, want the freed slot 0", slotOf)
	}
	got, err := pickAll(t, lb, map[string]string{"host": "x"}, 4)
	if err != nil || fmt.Sprint(got) != "[b]" {
		t.Fatalf("Pick(host=x) = %v, %v; want [b]", got, err)
	}
	// A relabel keeps a host's place; once b leaves, c is the subset.
	if err := lb.Upsert(&Host{ID: "b", Addr: "moved", Labels: label.FromMap(map[string]string{"host": "x"})}); err != nil {
		t.Fatal(err)
	}
	if got, _ := pickAll(t, lb, map[string]string{"host": "x"}, 4); fmt.Sprint(got) != "[b]" {
		t.Fatalf("after relabel: %v, want [b]", got)
	}
	lb.Remove("b")
	if got, _ := pickAll(t, lb, map[string]string{"host": "x"}, 4); fmt.Sprint(got) != "[c]" {
		t.Fatalf("after b left: %v, want [c]", got)
	}
}

// TestJoinOrderRenumbered: when the join counter runs out the hosts are
// renumbered in the order they have, and the earliest-joined rule holds.
func TestJoinOrderRenumbered(t *testing.T) {
	x := label.FromMap(map[string]string{"host": "x"})
	lb, err := New(Config{Selectors: []Selector{{Keys: []string{"host"}, SingleHostPerSubset: true}}}, testPolicy(),
		[]Host{{ID: "a", Labels: x}, {ID: "b", Labels: x}})
	if err != nil {
		t.Fatal(err)
	}
	lb.added = maxAdded - 1
	for _, id := range []string{"c", "d"} { // d's join renumbers
		if err := lb.Upsert(&Host{ID: id, Labels: x}); err != nil {
			t.Fatal(err)
		}
	}
	if lb.added != 4 {
		t.Fatalf("after renumbering the next join is %d, want 4", lb.added)
	}
	for _, want := range []string{"a", "b", "c", "d"} {
		if got, err := pickAll(t, lb, map[string]string{"host": "x"}, 3); err != nil || fmt.Sprint(got) != "["+want+"]" {
			t.Fatalf("Pick(host=x) = %v, %v; want [%s]", got, err, want)
		}
		lb.Remove(want)
	}
}

// TestManySelectors: past scanSelectors selectors a request's selector is
// found by map, with the same answers.
func TestManySelectors(t *testing.T) {
	var cfg Config
	var hosts []Host
	for i := range scanSelectors + 8 {
		k := fmt.Sprintf("k%02d", i)
		cfg.Selectors = append(cfg.Selectors, Selector{Keys: []string{k}})
		hosts = append(hosts, Host{ID: k, Labels: label.FromMap(map[string]string{k: "v"})})
	}
	lb, err := New(cfg, testPolicy(), hosts)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		got, err := pickAll(t, lb, map[string]string{h.ID: "v"}, 3)
		if err != nil || fmt.Sprint(got) != "["+h.ID+"]" {
			t.Fatalf("Pick(%s=v) = %v, %v", h.ID, got, err)
		}
	}
	if _, err := lb.Pick(map[string]string{"k00": "v", "k01": "v"}); !errors.Is(err, ErrNoSubset) {
		t.Fatalf("Pick of two keys: %v, want ErrNoSubset", err)
	}
}
