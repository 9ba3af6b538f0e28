package callstore

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestInterleavedWritersOneRun: writers taking t from a shared counter, as
// the race tester does, merge into one t order.
func TestInterleavedWritersOneRun(t *testing.T) {
	n := int64(600_000)
	if testing.Short() {
		n = 100_000
	}
	s := openT(t, t.TempDir(), Options{ChunkRecords: 8192, BucketRecords: 512, WriterBatch: 512, MaxBufferedRecords: 1 << 18})
	defer s.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 12 {
		w, err := s.Writer()
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer w.Close()
			for {
				c0 := next.Add(64) - 64
				if c0 >= n {
					return
				}
				for c := c0; c < min(c0+64, n); c++ {
					if err := w.Put(c, c, [BodySize]byte{}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	// One run unless a writer lagged by more than the memory budget (a
	// starved goroutine under -race on a busy machine): each forced merge
	// needs MaxBufferedRecords/2 new records, so runs stay few.
	if maxRuns := 1 + int(n)/(1<<17); st.Records != uint64(n) || st.Runs > maxRuns {
		t.Fatalf("stats %+v, want %d records in <= %d runs", st, n, maxRuns)
	}
	got, err := s.Messages(0, n, 0, n)
	if err != nil || int64(len(got)) != n {
		t.Fatalf("Messages: %d records, %v", len(got), err)
	}
	for i, m := range got {
		if m.T != int64(i) {
			t.Fatalf("record %d has t %d", i, m.T)
		}
	}
}
