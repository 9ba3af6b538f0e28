package label

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestFromBytePairs: the one-loop constructor builds what LabelsBuilder
// builds, and reports order the same way, for sorted, unsorted and repeated
// keys, empty keys and values, and no pairs at all.
func TestFromBytePairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	cases := [][]BytePair{
		nil,
		{{Key: []byte("a"), Value: []byte("1")}},
		{{Key: []byte(""), Value: []byte("")}},
		{{Key: []byte(""), Value: []byte("")}, {Key: []byte(""), Value: []byte("")}},
		{{Key: []byte("a"), Value: []byte("")}, {Key: []byte("b"), Value: []byte("x")}},
		{{Key: []byte("b"), Value: []byte("1")}, {Key: []byte("a"), Value: []byte("2")}},
		{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("a"), Value: []byte("2")}},
	}
	for i := range 200 {
		var ps []BytePair
		k := 0
		for range rng.IntN(20) {
			if i%2 == 0 {
				k += 1 + rng.IntN(3) // ascending
			} else {
				k = rng.IntN(30)
			}
			ps = append(ps, BytePair{Key: []byte(fmt.Sprintf("k%03d", k)), Value: []byte(fmt.Sprint(rng.IntN(1000)))})
		}
		cases = append(cases, ps)
	}
	sorted := 0
	for _, ps := range cases {
		var b LabelsBuilder
		size := 0
		for _, p := range ps {
			size += len(p.Key) + len(p.Value)
		}
		b.Grow(len(ps), size)
		for _, p := range ps {
			b.AddBytes(p.Key, p.Value)
		}
		want, wantOK := b.Labels()
		got, ok := FromBytePairs(ps)
		if ok != wantOK {
			t.Fatalf("%q: ok %v, want %v", ps, ok, wantOK)
		}
		if ok {
			sorted++
			if !got.Equal(want) || got.Len() != len(ps) {
				t.Fatalf("%q: %v, want %v", ps, got.Map(), want.Map())
			}
		}
	}
	if sorted < 90 {
		t.Fatalf("only %d cases had sorted keys: the test no longer covers building", sorted)
	}
}
