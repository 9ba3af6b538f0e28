package label

import (
	"math/rand/v2"
	"testing"

	"github.com/bits-and-blooms/bitset"
)

// TestPostingsMatchAgainstReference compares Postings.Match with
// Selector.Matches over random labels, selectors and edits, including
// copy-on-write versions, on small and large universes (both the sparse
// and the dense path).
func TestPostingsMatchAgainstReference(t *testing.T) {
	for _, n := range []int{40, 300, 3000} {
		rng := rand.New(rand.NewPCG(uint64(n), 2))
		keys := []string{"zone", "env", "ver", "rack"}
		vals := []string{"a", "b", "c", "", "rare"}
		randLabels := func() map[string]string {
			m := map[string]string{}
			for _, k := range keys {
				if rng.IntN(4) > 0 {
					v := vals[rng.IntN(4)]
					if rng.IntN(50) == 0 {
						v = "rare"
					}
					m[k] = v
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
					s = append(s, Requirement{Key: k, Op: op, Values: []string{vals[rng.IntN(2)], vals[2+rng.IntN(3)]}})
				default:
					s = append(s, Requirement{Key: k, Op: op})
				}
			}
			return s
		}
		labels := make([]map[string]string, n)
		universe := bitset.New(uint(n))
		ix := NewPostings(uint32(n))
		for i := range labels {
			labels[i] = randLabels()
			if rng.IntN(10) > 0 {
				universe.Set(uint(i))
			}
			for k, v := range labels[i] {
				ix.Add(uint32(i), k, v)
			}
		}
		check := func(ix *Postings, labels []map[string]string, round int) {
			t.Helper()
			for range 60 {
				sel := randSelector()
				got := ix.Match(sel, universe)
				want := bitset.New(uint(n))
				for i, l := range labels {
					if universe.Test(uint(i)) && sel.Matches(Map(l)) {
						want.Set(uint(i))
					}
				}
				if got.Count() != want.Count() || got.IntersectionCardinality(want) != want.Count() {
					t.Fatalf("n=%d round %d: Match(%q) = %v, want %v", n, round, sel.String(), got, want)
				}
			}
		}
		check(ix, labels, -1)
		for round := range 20 {
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
}

func BenchmarkMatch(b *testing.B) {
	ix := NewPostings(100)
	universe := bitset.New(100)
	for i := range 100 {
		universe.Set(uint(i))
		for k := 1; k <= 16; k++ {
			ix.Add(uint32(i), "meta-key"+string(rune('a'+k)), "v"+string(rune('a'+i%(k+1))))
		}
	}
	sel, _ := Parse("meta-keyb=va,meta-keyc!=vz")
	b.ReportAllocs()
	for b.Loop() {
		ix.Match(sel, universe)
	}
}
