package label

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/bits-and-blooms/bitset"
)

func postingSlots(p *Posting) []uint32 {
	if p == nil {
		return nil
	}
	if p.Bits() != nil {
		var out []uint32
		for i, ok := p.Bits().NextSet(0); ok; i, ok = p.Bits().NextSet(i + 1) {
			out = append(out, uint32(i))
		}
		return out
	}
	return slices.Clone(p.List())
}

// TestPostingsAgainstReference drives builder, Add and Remove against a map
// of sets and checks every version stays as it was when it was shared.
func TestPostingsAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 20 {
		universe := uint32(1 + rng.IntN(500))
		vals := 1 + rng.IntN(40) // few values: dense; many: lists
		ref := map[string]map[uint32]bool{}
		b := NewPostingsBuilder(universe)
		k := b.Key("k")
		for s := range universe {
			if rng.IntN(4) == 0 {
				continue
			}
			v := fmt.Sprint(rng.IntN(vals))
			b.AppendSlot(k, v, s)
			if ref[v] == nil {
				ref[v] = map[uint32]bool{}
			}
			ref[v][s] = true
		}
		ix := b.Build()
		check := func(ix *Postings, ref map[string]map[uint32]bool) {
			t.Helper()
			checkKey(t, ix, ref, fmt.Sprint("round ", round))
		}
		check(ix, ref)
		for range 5 {
			old, oldRef := ix, cloneRef(ref)
			ix = ix.Edit()
			for range 30 {
				s := uint32(rng.IntN(int(universe) + 10))
				v := fmt.Sprint(rng.IntN(vals))
				if rng.IntN(2) == 0 {
					ix.Add(s, "k", v)
					if ref[v] == nil {
						ref[v] = map[uint32]bool{}
					}
					ref[v][s] = true
				} else {
					ix.Remove(s, "k", v)
					delete(ref[v], s)
					if len(ref[v]) == 0 {
						delete(ref, v)
					}
				}
			}
			check(ix, ref)
			check(old, oldRef) // copy-on-write left the shared version alone
		}
	}
}

// checkKey checks that key "k" of ix holds exactly ref (value -> slots):
// NumValues, Values (each value once) and Get with its slots and Len.
func checkKey(t testing.TB, ix *Postings, ref map[string]map[uint32]bool, what string) {
	t.Helper()
	if got, want := ix.NumValues("k"), len(ref); got != want {
		t.Fatalf("%s: NumValues = %d, want %d", what, got, want)
	}
	seen := make(map[string]bool)
	ix.Values("k", func(val string, p *Posting) bool {
		if seen[val] {
			t.Fatalf("%s: Values yields %s twice", what, val)
		}
		seen[val] = true
		if ref[val] == nil {
			t.Fatalf("%s: Values yields %s, which holds no slot", what, val)
		}
		return true
	})
	if len(seen) != len(ref) {
		t.Fatalf("%s: Values yields %d values, want %d", what, len(seen), len(ref))
	}
	for val, set := range ref {
		want := slices.Sorted(maps.Keys(set))
		p := ix.Get("k", val)
		if got := postingSlots(p); !slices.Equal(got, want) {
			t.Fatalf("%s: value %s: got %v, want %v", what, val, got, want)
		}
		if p.Len() != len(want) {
			t.Fatalf("%s: value %s: Len %d, want %d", what, val, p.Len(), len(want))
		}
	}
}

// checkSameIndex checks that a holds what b holds under each of keys.
func checkSameIndex(t testing.TB, a, b *Postings, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if a.NumValues(k) != b.NumValues(k) {
			t.Fatalf("key %s: %d values, want %d", k, a.NumValues(k), b.NumValues(k))
		}
		b.Values(k, func(v string, p *Posting) bool {
			if got, want := postingSlots(a.Get(k, v)), postingSlots(p); !slices.Equal(got, want) {
				t.Fatalf("%s=%s: %v, want %v", k, v, got, want)
			}
			return true
		})
	}
}

func cloneRef(r map[string]map[uint32]bool) map[string]map[uint32]bool {
	c := map[string]map[uint32]bool{}
	for v, s := range r {
		c[v] = map[uint32]bool{}
		for x := range s {
			c[v][x] = true
		}
	}
	return c
}

func TestPostingsForm(t *testing.T) {
	tests := []struct {
		name      string
		universe  uint32
		slots     int
		wantDense bool
	}{
		{"rare value stays a list", 50000, 10, false},
		{"common value becomes a bitset", 8000, 2000, true},
		{"at the threshold", 3200, 101, true},
		{"below the threshold", 3200, 99, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewPostingsBuilder(tt.universe)
			k := b.Key("k")
			for s := range tt.slots {
				b.AppendSlot(k, "v", uint32(s))
			}
			p := b.Build().Get("k", "v")
			if (p.Bits() != nil) != tt.wantDense {
				t.Fatalf("dense = %v, want %v", p.Bits() != nil, tt.wantDense)
			}
			if p.Len() != tt.slots || !p.Contains(uint32(tt.slots-1)) || p.Contains(uint32(tt.slots)) {
				t.Fatalf("Len %d, want %d, or Contains wrong", p.Len(), tt.slots)
			}
		})
	}
}

// BenchmarkIntersect is the measurement behind the subset build's choice of
// a dense bitset over roaring: intersecting two postings of the seed's data
// (8000 slots, a value covers 1/4 of them).
func BenchmarkIntersect(b *testing.B) {
	for _, n := range []int{8000, 50000} {
		rng := rand.New(rand.NewPCG(1, 2))
		ra, rb := roaring.New(), roaring.New()
		da, db := bitset.New(uint(n)), bitset.New(uint(n))
		for s := range n {
			if rng.IntN(4) == 0 {
				ra.Add(uint32(s))
				da.Set(uint(s))
			}
			if rng.IntN(4) == 0 {
				rb.Add(uint32(s))
				db.Set(uint(s))
			}
		}
		b.Run(fmt.Sprintf("roaring/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = roaring.And(ra, rb).GetCardinality()
			}
		})
		b.Run(fmt.Sprintf("bitset/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			scratch := bitset.New(uint(n))
			for b.Loop() {
				da.CopyFull(scratch)
				scratch.InPlaceIntersection(db)
				_ = scratch.Count()
			}
		})
	}
}
