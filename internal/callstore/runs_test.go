package callstore

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestInterleavedWritersOneRun: writers taking t from a shared counter, as
// the race tester does, must merge into a single run (no forced merges).
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
	if st.Records != uint64(n) || st.Runs != 1 {
		t.Fatalf("stats %+v, want %d records in 1 run", st, n)
	}
}
