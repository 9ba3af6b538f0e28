package calllog

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestInOrder: the pending entries' indices by start, ties in the order
// they came, whether the starts fit inOrder's integer keys (a 10 ms batch,
// equal starts, negative ones) or not (hours apart, the int64 extremes).
func TestInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	spans := []int64{1, 10_000_000, 1 << 43, 1 << 44, math.MaxInt64}
	for _, span := range spans {
		for _, n := range []int{0, 1, 2, 300, 5000} {
			p := &partition{}
			for range n {
				t := rng.Int64N(span)
				if span == math.MaxInt64 && rng.IntN(2) == 0 {
					t = -t - 1
				}
				p.pending = append(p.pending, entry{t: t})
			}
			want := make([]int32, n)
			for i := range want {
				want[i] = int32(i)
			}
			slices.SortStableFunc(want, func(a, b int32) int { return cmp.Compare(p.pending[a].t, p.pending[b].t) })
			for round := range 2 { // again: the buffers reused
				if got := p.inOrder(); !slices.Equal(got, want) {
					t.Fatalf("span %d, %d entries, round %d: order differs from a stable sort by start", span, n, round)
				}
			}
		}
	}
}

// BenchmarkInOrder is flush's sort of a 10 ms batch at 40,000 calls/s,
// queued by end (starts out of order within a window of 64 calls).
func BenchmarkInOrder(b *testing.B) {
	p := &partition{}
	for i := range 400 {
		p.pending = append(p.pending, entry{t: 1_700_000_000_000_000_000 + int64(i)*25_000 + int64(i*7919%64)*25_000})
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(p.inOrder()) != 400 {
			b.Fatal("lost entries")
		}
	}
}
