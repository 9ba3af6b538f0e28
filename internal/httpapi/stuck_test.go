package httpapi

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/registry"
)

// TestStuckWatchersDoNotSlowWriters opens hundreds of blocking queries whose
// clients never read a byte, on a service whose answer is larger than a
// socket buffer, then writes to that service: writes and other readers keep
// their pace, and each waiting query costs bounded memory.
func TestStuckWatchersDoNotSlowWriters(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	big := strings.Repeat("x", 4000)
	var items []string
	for i := range 200 {
		items = append(items, fmt.Sprintf(`{"service":"hot","host":"h","port":%d,"metadata":{"a":%q,"b":%q}}`, i+1, big, big))
	}
	s.must("POST", "/v1/instances", batch(items...), nil) // ~1.6 MB per answer

	// The same write and read without watchers first: the bounds below
	// are relative to them, so that a loaded machine (everything slower)
	// does not pass for watchers slowing the server down.
	t0 := time.Now()
	s.must("POST", "/v1/instances", `{"service":"hot","host":"h","port":999}`, nil)
	baseWrite := time.Since(t0)
	t0 = time.Now()
	var q queryAnswer
	s.must("GET", "/v1/namespaces/default/services/hot/instances?selector=a", "", &q)
	baseRead := time.Since(t0)
	bound := func(base time.Duration) time.Duration { return max(3*time.Second, 20*base) }

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	const stuck = 300
	addr := strings.TrimPrefix(s.url, "http://")
	conns := make([]net.Conn, 0, stuck)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	index := s.reg.Catalog().Revision()
	for range stuck {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /v1/namespaces/default/services/hot/instances?index=%d&wait=60s HTTP/1.1\r\nHost: x\r\n\r\n", index)
	}
	waitFor(t, func() bool { return s.reg.Catalog().Waiters() == stuck })

	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	perWaiter := (int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)) / stuck
	t.Logf("memory per waiting blocking query: %d bytes", perWaiter)
	if perWaiter > 64<<10 {
		t.Fatalf("each waiting blocking query costs %d bytes, want under 64 KiB", perWaiter)
	}

	// Every write wakes all of them; none of them reads. Writers must not care.
	start := time.Now()
	var slowest time.Duration
	for i := range 40 {
		t0 := time.Now()
		s.must("POST", "/v1/instances", fmt.Sprintf(`{"service":"hot","host":"h","port":%d}`, 1000+i), nil)
		slowest = max(slowest, time.Since(t0))
	}
	t.Logf("40 writes with %d stuck watchers: %v, slowest %v", stuck, time.Since(start), slowest)
	if slowest > bound(baseWrite) {
		t.Fatalf("a write took %v with stuck watchers (%v without)", slowest, baseWrite)
	}
	// Another reader is answered promptly too.
	t0 = time.Now()
	s.must("GET", "/v1/namespaces/default/services/hot/instances?selector=a", "", &q)
	if d := time.Since(t0); d > bound(baseRead) || len(q.Instances) != 200 {
		t.Fatalf("reader took %v for %d instances (%v without watchers)", d, len(q.Instances), baseRead)
	}
}
