package locality

import (
	"errors"
	"slices"
	"testing"
)

func loc(s string) Locality {
	l, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return l
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Locality
		bad  bool
	}{
		{in: "", want: Locality{}},
		{in: "us-east", want: Locality{Region: "us-east"}},
		{in: "us-east/a", want: Locality{Region: "us-east", Zone: "a"}},
		{in: "us-east/a/rack1", want: Locality{Region: "us-east", Zone: "a", SubZone: "rack1"}},
		{in: "us-east//rack1", bad: true},
		{in: "a/b/c/d", bad: true},
		{in: "us-east/*", bad: true},
		{in: "/a", bad: true},
	} {
		got, err := Parse(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q) = %v, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("Parse(%q).String() = %q", tc.in, got.String())
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		l, err := Parse(s)
		if err != nil {
			return
		}
		// What parses prints back as itself and matches itself as a pattern.
		if l.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, l.String())
		}
		if s != "" && !Match(l, s) {
			t.Fatalf("%v does not match its own pattern", l)
		}
	})
}

func TestMatch(t *testing.T) {
	l := loc("us-east/a/rack1")
	for pattern, want := range map[string]bool{
		"us-east": true, "us-east/*": true, "us-east/a": true, "us-east/a/rack1": true, "*": true, "*/a": true,
		"us-west": false, "us-east/b": false, "us-east/a/rack2": false, "us-east/a/rack1/x": false,
	} {
		if got := Match(l, pattern); got != want {
			t.Errorf("Match(%v, %q) = %v, want %v", l, pattern, got, want)
		}
	}
}

// The priorities of istio.io's locality failover task and istiod's rules.
func TestPriorities(t *testing.T) {
	self := loc("region1/zone1/sub1")
	locs := []Locality{loc("region1/zone1/sub1"), loc("region1/zone1/sub2"), loc("region1/zone2/sub1"),
		loc("region2/zone3"), loc("region3/zone4")}
	for _, tc := range []struct {
		name     string
		failover []Failover
		want     []uint32
	}{
		{name: "no rules", want: []uint32{0, 1, 2, 3, 3}},
		{name: "failover to region3", failover: []Failover{{From: "region1", To: "region3"}}, want: []uint32{0, 1, 2, 4, 3}},
		{name: "rule for another region", failover: []Failover{{From: "region9", To: "region3"}}, want: []uint32{0, 1, 2, 3, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := make([]uint32, len(locs))
			for i, l := range locs {
				raw[i] = Priority(self, l, tc.failover)
			}
			if !slices.Equal(raw, tc.want) {
				t.Fatalf("Priority = %v, want %v", raw, tc.want)
			}
			dense := Priorities(self, locs, tc.failover)
			// Dense: same order, no gaps.
			for i := range dense {
				for j := range dense {
					if (raw[i] < raw[j]) != (dense[i] < dense[j]) {
						t.Fatalf("Priorities = %v does not keep the order of %v", dense, raw)
					}
				}
			}
			if m := slices.Max(dense); int(m) != len(slices.Compact(slices.Sorted(slices.Values(raw))))-1 {
				t.Fatalf("Priorities = %v has gaps", dense)
			}
		})
	}
}

func TestWeights(t *testing.T) {
	locs := []Locality{loc("us-west/zone1"), loc("us-west/zone2"), loc("us-east/zone3"), loc("eu/zone4")}
	w := []uint32{2, 2, 1, 1}
	rules := []Distribute{
		{From: "eu/*", To: []Share{{Pattern: "eu", Weight: 100}}},
		// istio.io's example: from us-west/zone1, 80% to zone1, 20% to zone2.
		{From: "us-west/zone1/*", To: []Share{{Pattern: "us-west/zone1/*", Weight: 80}, {Pattern: "us-west/*", Weight: 20}}},
	}
	got, ok := Weights(loc("us-west/zone1/sub"), locs, w, rules)
	if !ok || !slices.Equal(got, []uint32{80000, 20000, 0, 0}) {
		t.Fatalf("Weights = %v, %v; want [80000 20000 0 0]", got, ok)
	}
	got, ok = Weights(loc("us-east/zone3"), locs, w, rules)
	if ok || !slices.Equal(got, w) {
		t.Fatalf("no matching rule: Weights = %v, %v; want %v unchanged", got, ok, w)
	}
	// One pattern over two localities splits by their own weights.
	got, _ = Weights(loc("x"), locs, w, []Distribute{{From: "*", To: []Share{{Pattern: "us-west", Weight: 60}, {Pattern: "*", Weight: 40}}}})
	if !slices.Equal(got, []uint32{30000, 30000, 20000, 20000}) {
		t.Fatalf("split Weights = %v", got)
	}
}

// Envoy's priority load figures (its docs' "Priority levels" table).
func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		levels []Level
		want   []uint32
	}{
		{name: "all healthy", levels: []Level{{10, 10}, {10, 10}}, want: []uint32{100, 0}},
		{name: "72% is still 100%", levels: []Level{{72, 100}, {100, 100}}, want: []uint32{100, 0}},
		{name: "71% spills 1%", levels: []Level{{71, 100}, {100, 100}}, want: []uint32{99, 1}},
		{name: "50%", levels: []Level{{50, 100}, {100, 100}}, want: []uint32{70, 30}},
		{name: "25%", levels: []Level{{25, 100}, {100, 100}}, want: []uint32{35, 65}},
		{name: "zone down", levels: []Level{{0, 2}, {2, 2}}, want: []uint32{0, 100}},
		{name: "three levels", levels: []Level{{20, 100}, {20, 100}, {100, 100}}, want: []uint32{28, 28, 44}},
		// 20% healthy each: 28/28/28 normalized to 100, the rounding leftover to P0.
		{name: "normalized", levels: []Level{{20, 100}, {20, 100}, {20, 100}}, want: []uint32{34, 33, 33}},
		{name: "nothing healthy", levels: []Level{{0, 3}, {0, 3}}, want: []uint32{100, 0}},
		{name: "empty level", levels: []Level{{0, 0}, {3, 3}}, want: []uint32{0, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Load(tc.levels, nil)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Load(%v) = %v, want %v", tc.levels, got, tc.want)
			}
		})
	}
}

// loadOf is LevelOf's split as Load's: the share of each level over r
// in [0, 100).
func loadOf(t *testing.T, health []uint32, skip uint64) []uint32 {
	t.Helper()
	out := make([]uint32, len(health))
	for r := range uint32(100) {
		lv, ok := LevelOf(health, skip, r)
		if !ok {
			return nil
		}
		out[lv]++
	}
	return out
}

// TestLevelOf: without skips LevelOf splits as Load (TestLoad's cases);
// with skips the levels left take the load by their health as Envoy's
// previous_priorities retry priority computes it; with no health left it
// says so.
func TestLevelOf(t *testing.T) {
	for _, levels := range [][]Level{{{10, 10}, {10, 10}}, {{71, 100}, {100, 100}}, {{25, 100}, {100, 100}}, {{0, 2}, {2, 2}},
		{{20, 100}, {20, 100}, {100, 100}}, {{20, 100}, {20, 100}, {20, 100}}, {{0, 0}, {3, 3}}} {
		health := make([]uint32, len(levels))
		for i, l := range levels {
			health[i] = Health(l)
		}
		if got, want := loadOf(t, health, 0), Load(levels, nil); !slices.Equal(got, want) {
			t.Fatalf("LevelOf over %v = %v, Load %v", levels, got, want)
		}
	}
	for _, tc := range []struct {
		name   string
		health []uint32
		skip   uint64
		want   []uint32 // nil: no health left
	}{
		{"local tried", []uint32{100, 0, 100}, 1, []uint32{0, 0, 100}},
		{"two tried", []uint32{100, 100, 100}, 0b11, []uint32{0, 0, 100}},
		{"the rest healthy enough", []uint32{100, 28, 100}, 1, []uint32{0, 28, 72}},
		// 28 + 28 of 56: normalized to 50/50.
		{"the rest normalized", []uint32{100, 28, 28}, 1, []uint32{0, 50, 50}},
		// 20 + 20 + 20 of 60: 33 each, the leftover to the first left.
		{"leftover to the first left", []uint32{100, 20, 20, 20}, 1, []uint32{0, 34, 33, 33}},
		{"all tried", []uint32{100, 100}, 0b11, nil},
		{"none left healthy", []uint32{100, 0}, 1, nil},
		{"a skip beyond the levels", []uint32{70, 100}, 1 << 5, []uint32{70, 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := loadOf(t, tc.health, tc.skip); !slices.Equal(got, tc.want) {
				t.Fatalf("LevelOf(%v, %b) splits %v, want %v", tc.health, tc.skip, got, tc.want)
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { LevelOf([]uint32{100, 20, 20}, 1, 50) }); n != 0 {
		t.Fatalf("LevelOf allocates %v times", n)
	}
}

func BenchmarkLoad(b *testing.B) {
	levels := []Level{{3, 10}, {5, 10}, {10, 10}}
	out := make([]uint32, 0, 3)
	b.ReportAllocs()
	for b.Loop() {
		out = Load(levels, out)
	}
}

// TestFailoverPriority: Istio's ordering by leading labels matched, with
// a key=value override.
func TestFailoverPriority(t *testing.T) {
	client := map[string]string{"network": "n1", "tier": "gold"}
	keys := []string{"network", "tier"}
	for _, tc := range []struct {
		name string
		keys []string
		ep   map[string]string
		want uint32
	}{
		{"both match", keys, map[string]string{"network": "n1", "tier": "gold"}, 0},
		{"first only", keys, map[string]string{"network": "n1", "tier": "silver"}, 1},
		{"first differs", keys, map[string]string{"network": "n2", "tier": "gold"}, 2},
		{"absent on both sides matches", []string{"rack"}, map[string]string{}, 0},
		{"override", []string{"tier=silver"}, map[string]string{"tier": "silver"}, 0},
		{"override differs", []string{"tier=silver"}, map[string]string{"tier": "gold"}, 1},
	} {
		got := FailoverPriority(tc.keys, func(k string) string { return client[k] }, func(k string) string { return tc.ep[k] })
		if got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
