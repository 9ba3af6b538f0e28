package acl

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := newLimiter(Rate{PerSecond: 10, Burst: 3})
	now := time.Unix(1000, 0).UnixNano()
	for i := range 3 {
		if v := l.allow("a", now); !v.ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	v := l.allow("a", now)
	if v.ok || v.retryAfter <= 0 || v.retryAfter > 100*time.Millisecond || !v.report {
		t.Fatalf("4th at once: %+v, want refused, retry within 100ms, reported", v)
	}
	if v := l.allow("a", now); v.ok || v.report {
		t.Fatalf("5th: %+v, want refused and not reported again within a second", v)
	}
	if v := l.allow("b", now); !v.ok {
		t.Fatal("another caller is refused")
	}
	if v := l.allow("a", now+int64(100*time.Millisecond)); !v.ok {
		t.Fatal("one token refilled after 100ms at 10/s, yet refused")
	}
	v = l.allow("a", now+int64(1100*time.Millisecond))
	if !v.ok {
		t.Fatalf("after a second: %+v", v)
	}
	for i := 0; v.ok; i++ {
		if i > 3 {
			t.Fatal("more than the burst allowed at once")
		}
		v = l.allow("a", now+int64(1100*time.Millisecond))
	}
	if !v.report || v.refused != 1 {
		t.Fatalf("first refusal a second later: %+v, want reported with the 1 refusal not reported before", v)
	}
}

// TestLimiterConcurrent: many goroutines of one caller never get more
// than the burst plus what the rate refills (the bucket is one atomic).
func TestLimiterConcurrent(t *testing.T) {
	l := newLimiter(Rate{PerSecond: 1, Burst: 50})
	now := time.Unix(1000, 0).UnixNano()
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if l.allow("one", now).ok {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 50 {
		t.Fatalf("%d of 1600 concurrent requests passed, want exactly the burst of 50", ok.Load())
	}
}

func TestLimiterSweepsIdleCallers(t *testing.T) {
	l := newLimiter(Rate{PerSecond: 100, Burst: 1})
	now := time.Unix(1000, 0).UnixNano()
	for i := range 20000 {
		l.allow(fmt.Sprint("caller-", i), now)
	}
	later := now + int64(time.Second)
	for i := range 20000 {
		l.allow(fmt.Sprint("other-", i), later)
	}
	total := 0
	l.buckets.Range(func(any, any) bool { total++; return true })
	if total > 30000 {
		t.Fatalf("%d buckets held for 40000 callers of whom half are idle and refilled", total)
	}
}

// TestLimiterSweepsRefusedIdleCallers: a caller refused again within the
// second after an audited refusal (so its count is not reported yet) and
// then idle is swept too, or anonymous addresses would pile up.
func TestLimiterSweepsRefusedIdleCallers(t *testing.T) {
	l := newLimiter(Rate{PerSecond: 100, Burst: 1})
	now := time.Unix(1000, 0).UnixNano()
	for i := range 5000 {
		k := fmt.Sprint("caller-", i)
		for range 3 { // allowed, refused and audited, refused and not audited
			l.allow(k, now)
		}
	}
	later := now + 2*int64(time.Second)
	for i := range 5000 {
		l.allow(fmt.Sprint("other-", i), later)
	}
	total := 0
	l.buckets.Range(func(any, any) bool { total++; return true })
	if total > 6000 {
		t.Fatalf("%d buckets held for 10000 callers of whom half are idle and refilled", total)
	}
}
