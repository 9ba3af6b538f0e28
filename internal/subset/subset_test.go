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
)

func testPolicy() balancer.Policy { return balancer.NewRoundRobin() }

// envoyHosts is the example of Envoy's subset load balancer documentation.
func envoyHosts() []Host {
	mk := func(id, stage, version, typ string, xlarge bool) Host {
		h := Host{ID: id, Addr: id + ":80", Weight: 1, Labels: map[string]string{"stage": stage, "version": version, "type": typ}}
		if xlarge {
			h.Labels["xlarge"] = "true"
		}
		return h
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
		{ID: "b", Labels: map[string]string{"version": "2"}},
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
	h := Host{ID: "x", Labels: map[string]string{"k": "v"}, Lists: map[string][]string{"k": {"v"}}}
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
	if err := lb.Upsert(&Host{ID: "e7", Labels: map[string]string{"stage": "dev", "version": "1.0", "type": "std"}}); err != nil {
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
						if r.Host.Labels[k] != v {
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
