package callstore

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// benchStore fills a store with n records, a = t (the race's demo) or a
// random in [0, 2^48), from 4 writers.
func benchStore(b *testing.B, n int, randomA bool) *Store {
	b.Helper()
	s := openT(b, b.TempDir(), Options{})
	b.Cleanup(func() { s.Close() })
	const writers = 4
	var wg sync.WaitGroup
	for w := range writers {
		wr, err := s.Writer()
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			defer wr.Close()
			r := rand.New(rand.NewPCG(uint64(w), 0))
			for i := w; i < n; i += writers {
				a := int64(i)
				if randomA {
					a = r.Int64N(1 << 48)
				}
				if err := wr.Put(int64(i), a, [BodySize]byte{byte(i)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkPut(b *testing.B) {
	s := openT(b, b.TempDir(), Options{})
	defer s.Close()
	w, _ := s.Writer()
	b.ReportAllocs()
	b.SetBytes(50)
	i := int64(0)
	for b.Loop() {
		if err := w.Put(i, i&0xffff, [BodySize]byte{}); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
}

func benchQueries(b *testing.B, randomA bool, avg bool) {
	const n = 1 << 20
	s := benchStore(b, n, randomA)
	r := rand.New(rand.NewPCG(1, 2))
	var dst []Message
	records := 0
	b.ReportAllocs()
	for b.Loop() {
		tMin := r.Int64N(n)
		tMax := tMin + r.Int64N(100_000)
		aMin, aMax := tMin-r.Int64N(1000), tMax
		if randomA {
			aMin = r.Int64N(1 << 48)
			aMax = aMin + r.Int64N(1<<47)
		}
		var err error
		if avg {
			_, err = s.AvgValue(aMin, aMax, tMin, tMax)
		} else {
			dst, err = s.AppendMessages(dst[:0], aMin, aMax, tMin, tMax)
			records += len(dst)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if !avg {
		b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
	}
}

func BenchmarkMessagesDemo(b *testing.B)   { benchQueries(b, false, false) }
func BenchmarkMessagesRandom(b *testing.B) { benchQueries(b, true, false) }
func BenchmarkAvgDemo(b *testing.B)        { benchQueries(b, false, true) }
func BenchmarkAvgRandom(b *testing.B)      { benchQueries(b, true, true) }
