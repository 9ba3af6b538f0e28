package label

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
)

// TestMatchAgainstReference compares Index.Match with Selector.Matches over
// random labels, selectors and edits, including copy-on-write versions.
func TestMatchAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"zone", "env", "ver", "rack"}
	vals := []string{"a", "b", "c", ""}
	randLabels := func() map[string]string {
		m := map[string]string{}
		for _, k := range keys {
			if rng.IntN(4) > 0 {
				m[k] = vals[rng.IntN(len(vals))]
			}
		}
		return m
	}
	randSelector := func() Selector {
		var s Selector
		for range rng.IntN(4) {
			k := keys[rng.IntN(len(keys))]
			switch op := Op(rng.IntN(6) + 1); op {
			case Equals, NotEquals:
				s = append(s, Requirement{Key: k, Op: op, Values: []string{vals[rng.IntN(len(vals))]}})
			case In, NotIn:
				s = append(s, Requirement{Key: k, Op: op, Values: []string{vals[rng.IntN(2)], vals[2+rng.IntN(2)]}})
			default:
				s = append(s, Requirement{Key: k, Op: op})
			}
		}
		return s
	}
	const n = 300
	labels := make([]map[string]string, n)
	ix := NewIndex()
	universe := roaring.New()
	for i := range labels {
		labels[i] = randLabels()
		universe.Add(uint32(i))
		for k, v := range labels[i] {
			ix.Add(uint32(i), k, v)
		}
	}
	check := func(ix *Index, labels []map[string]string, round int) {
		t.Helper()
		for range 50 {
			sel := randSelector()
			got := ix.Match(sel, universe)
			want := roaring.New()
			for i, l := range labels {
				if sel.Matches(Map(l)) {
					want.Add(uint32(i))
				}
			}
			if !got.Equals(want) {
				t.Fatalf("round %d: Match(%q) = %v, want %v", round, sel.String(), got.ToArray(), want.ToArray())
			}
		}
	}
	check(ix, labels, -1)
	for round := range 40 {
		old := ix
		oldLabels := append([]map[string]string(nil), labels...)
		ix = ix.Edit()
		for range 20 {
			i := rng.IntN(n)
			for k, v := range labels[i] {
				ix.Remove(uint32(i), k, v)
			}
			labels[i] = randLabels()
			for k, v := range labels[i] {
				ix.Add(uint32(i), k, v)
			}
		}
		check(ix, labels, round)
		check(old, oldLabels, round) // the published version must not have moved
	}
}

func TestIndexRemoveDropsEmpty(t *testing.T) {
	ix := NewIndex()
	ix.Add(1, "k", "v")
	ix.Add(2, "k", "w")
	ix.Remove(1, "k", "v")
	if ix.Get("k", "v") != nil {
		t.Fatal("empty value set kept")
	}
	if got := ix.NumValues("k"); got != 1 {
		t.Fatalf("NumValues = %d, want 1", got)
	}
	ix.Remove(2, "k", "w")
	if ix.Has("k") != nil {
		t.Fatal("empty key kept")
	}
	ix.Remove(3, "nope", "x") // unknown: no-op
}

func TestAddSorted(t *testing.T) {
	ix := NewIndex()
	ix.AddSorted([]uint32{1, 5, 9}, "zone", "z1")
	ix.AddSorted(nil, "zone", "z2")
	if got := ix.Get("zone", "z1").ToArray(); fmt.Sprint(got) != "[1 5 9]" {
		t.Fatalf("Get = %v", got)
	}
	if ix.Get("zone", "z2") != nil {
		t.Fatal("empty AddSorted created a value")
	}
}

func BenchmarkMatch(b *testing.B) {
	ix := NewIndex()
	universe := roaring.New()
	for i := range 100 {
		universe.Add(uint32(i))
		for k := range 16 {
			ix.Add(uint32(i), fmt.Sprintf("key%06d", k), fmt.Sprintf("val%06d", i%(k+2)))
		}
	}
	sel, _ := Parse("key000001=val000001,key000003!=val000000")
	b.ReportAllocs()
	for b.Loop() {
		ix.Match(sel, universe)
	}
}
