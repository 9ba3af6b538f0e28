package label

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bits-and-blooms/bitset"
)

// TestAddPostingMatchesAppendSlot: a value's slots given at once, as a list
// or a bitset, build the posting AppendSlot builds from them one by one,
// dense or list alike.
func TestAddPostingMatchesAppendSlot(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 30 {
		universe := uint32(1 + rng.IntN(3000))
		vals := 1 + rng.IntN(60)
		bySlot := NewPostingsBuilder(universe)
		byValue := NewPostingsBuilder(universe)
		k1, k2 := bySlot.Key("k"), byValue.Key("k")
		groups := map[string][]uint32{}
		var order []string
		for s := range universe {
			if rng.IntN(3) == 0 {
				continue
			}
			v := fmt.Sprint(rng.IntN(vals))
			bySlot.AppendSlot(k1, v, s)
			if groups[v] == nil {
				order = append(order, v)
			}
			groups[v] = append(groups[v], s)
		}
		for i, v := range order {
			if i%2 == 0 {
				byValue.AddPosting(k2, v, groups[v])
				continue
			}
			bits := bitset.New(uint(universe))
			for _, s := range groups[v] {
				bits.Set(uint(s))
			}
			byValue.AddBits(k2, v, bits)
		}
		want, got := bySlot.Build(), byValue.Build()
		if got.NumValues("k") != want.NumValues("k") {
			t.Fatalf("round %d: %d values, want %d", round, got.NumValues("k"), want.NumValues("k"))
		}
		for v := range groups {
			g, w := got.Get("k", v), want.Get("k", v)
			if !slices.Equal(postingSlots(g), postingSlots(w)) || (g.Bits() == nil) != (w.Bits() == nil) || g.Len() != w.Len() {
				t.Fatalf("round %d value %s: got %v (dense %v), want %v (dense %v)", round, v,
					postingSlots(g), g.Bits() != nil, postingSlots(w), w.Bits() != nil)
			}
		}
	}
}

func TestPairs(t *testing.T) {
	for _, m := range []map[string]string{nil, {"a": "1", "bb": "", "ccc": "333"}} {
		l := FromMap(m)
		var got, want []string
		for i := range l.Len() {
			k, v := l.At(i)
			want = append(want, fmt.Sprintf("%s|%s", k, v))
		}
		for it := l.Pairs(); ; {
			kv, n, next, ok := it.Next()
			if !ok {
				break
			}
			it = next
			got = append(got, kv[:n]+"|"+kv[n:])
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pairs %q, want %q", got, want)
		}
	}
	if DenseLen(3200) != 101 {
		t.Fatalf("DenseLen(3200) = %d", DenseLen(3200))
	}
}

// BenchmarkBuild builds the index of a service of 50,000 slots as a restart
// does: 16 keys, one with a value per slot (an instance name), one with a
// single value, the others with 500 values (replicas cycling through 500
// metadata sets).
func BenchmarkBuild(b *testing.B) {
	const n = 50000
	vals := make([][16]string, n)
	for s := range vals {
		for k := range 16 {
			switch k {
			case 0:
				vals[s][k] = fmt.Sprintf("pod-%06d", s)
			case 1:
				vals[s][k] = "prod"
			default:
				vals[s][k] = fmt.Sprintf("v%02d-%03d", k, s%500)
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		bl := NewPostingsBuilder(n)
		var keys [16]int
		for k := range keys {
			keys[k] = bl.Key(fmt.Sprintf("key%02d", k))
		}
		for s := range vals {
			for k := range keys {
				bl.AppendSlot(keys[k], vals[s][k], uint32(s))
			}
		}
		if ix := bl.Build(); ix.NumValues("key00") != n || ix.NumValues("key02") != 500 {
			b.Fatalf("built %d and %d values, want %d and 500", ix.NumValues("key00"), ix.NumValues("key02"), n)
		}
	}
}
