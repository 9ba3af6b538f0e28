package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// parseMemoryLimit reads --memory-limit: a size with an optional unit (B,
// KiB, MiB, GiB, TiB; KB, MB, GB: powers of 1000, as in GOMEMLIMIT), or
// "off". It returns math.MaxInt64 for off.
func parseMemoryLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "off" {
		return math.MaxInt64, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{
		{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
	}
	num, mult := s, int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("--memory-limit %q: want a positive size such as 450MiB or 2GiB, or off", s)
	}
	return n * mult, nil
}

// applyMemoryLimit sets the Go runtime's soft memory limit from
// --memory-limit; an empty flag keeps GOMEMLIMIT (or no limit). It returns
// the limit in force, math.MaxInt64 for none.
func applyMemoryLimit(flag string) (int64, error) {
	if flag == "" {
		return debug.SetMemoryLimit(-1), nil // -1 reads: GOMEMLIMIT or none
	}
	n, err := parseMemoryLimit(flag)
	if err != nil {
		return 0, err
	}
	debug.SetMemoryLimit(n)
	return n, nil
}

// Quiet-release policy: see releaseWhenQuiet.
const (
	releaseTick  = time.Second
	releaseBurst = 64 << 20 // allocated since the last release, bytes, at least
	releaseQuiet = 1 << 20  // allocated in the last tick: the server is quiet
)

// shouldRelease decides, once a tick, whether to hand garbage back: the
// process allocated at least releaseBurst, and half its live heap, since the
// last release (a bulk load, a burst of writes) and has now gone quiet. The
// half-heap floor bounds the forced cycles of a bursty load to about twice
// the GC's own (GOGC=100 runs one per live heap allocated).
func shouldRelease(sinceRelease, lastTick, live uint64) bool {
	return sinceRelease >= max(releaseBurst, live/2) && lastTick < releaseQuiet
}

// releaseWhenQuiet returns the garbage of a burst (a bulk load's decode
// buffers, request bodies, replaced index chunks) to the OS once the server
// goes quiet after it. Without it the heap stays at the GC's goal, twice
// the live data under GOGC=100, until the next cycle, which a quiet server
// may not run for minutes: RSS right after loading 205,000 instances was
// 700 MB against 365 MB after a restart. A release is one forced GC and a
// scavenge, off the request path; under steady load it never fires. It
// runs until ctx ends.
func releaseWhenQuiet(ctx context.Context, log *slog.Logger) {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}
	value := func(i int) uint64 {
		if sample[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[i].Value.Uint64()
	}
	read := func() uint64 { metrics.Read(sample); return value(0) }
	t := time.NewTicker(releaseTick)
	defer t.Stop()
	released, prev := read(), read()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := read()
		if shouldRelease(now-released, now-prev, value(1)) {
			start := time.Now()
			debug.FreeOSMemory()
			log.Debug("released garbage after a burst", "allocated_mb", (now-released)>>20, "took", time.Since(start))
			now = read()
			released = now
		}
		prev = now
	}
}

// memoryLimitName is a limit for the log.
func memoryLimitName(n int64) string {
	if n == math.MaxInt64 {
		return "off"
	}
	return strconv.FormatInt(n>>20, 10) + "MiB"
}
