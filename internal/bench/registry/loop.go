package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// loaderStats collects one loader goroutine's figures.
type loaderStats struct {
	lat      []time.Duration
	requests int64
	items    int64
	errors   int64
	firstErr error
}

// add counts one loader goroutine's requests, items and errors into t
// (the first error seen stands) and returns lat with its latencies added.
func (t *Throughput) add(lat []time.Duration, st *loaderStats) []time.Duration {
	t.Requests += st.requests
	t.Items += st.items
	t.Errors += st.errors
	if st.firstErr != nil && t.FirstError == "" {
		t.FirstError = st.firstErr.Error()
	}
	return append(lat, st.lat...)
}

// summarize sets t's rate of items over elapsed and the percentiles of
// lat, which it sorts.
func (t *Throughput) summarize(lat []time.Duration, elapsed time.Duration) {
	t.PerSecond = report.Round3(float64(t.Items) / elapsed.Seconds())
	s := report.Summarize(lat)
	t.P50Ms, t.P99Ms, t.MaxMs = s.P50Ms, s.P99Ms, s.MaxMs
}

// step sends one request on c for loader goroutine g and returns how many
// items it carried, or done when the scenario has nothing left to send.
type step func(ctx context.Context, g int, c *caller) (items int, done bool, err error)

// loop runs conns goroutines calling step until the duration passes, ctx
// ends, or step reports done; it returns the merged figures. Requests in
// flight when the duration passes are finished and counted, not cut short:
// a cut request may still have been committed, and its latency is real.
func (r *run) loop(ctx context.Context, name string, conns int, step step) (*Throughput, error) {
	stats := make([]loaderStats, conns)
	var wg sync.WaitGroup
	bar := report.NewTimeBar(ctx, r.cfg.Progress, name, r.cfg.Duration)
	cpu := r.startCPU(ctx)
	start := time.Now()
	end := start.Add(r.cfg.Duration)
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[g]
			st.lat = make([]time.Duration, 0, 4096)
			c := r.caller()
			defer c.close()
			consecutive := 0
			for t0 := time.Now(); ctx.Err() == nil && t0.Before(end); t0 = time.Now() {
				n, done, err := step(ctx, g, c)
				if done {
					return
				}
				if err != nil {
					if ctx.Err() != nil {
						return // interrupted
					}
					st.errors++
					if st.firstErr == nil {
						st.firstErr = err
					}
					if consecutive++; consecutive >= 100 {
						return // the server is failing; stop hammering it
					}
					continue
				}
				consecutive = 0
				st.lat = append(st.lat, time.Since(t0))
				st.requests++
				st.items += int64(n)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	bar.Finish()
	res := &Throughput{Conns: conns, Seconds: report.Round3(elapsed.Seconds()), CPU: cpu.Stop(ctx)}
	var all []time.Duration
	for i := range stats {
		all = res.add(all, &stats[i])
	}
	res.summarize(all, elapsed)
	if res.Requests == 0 {
		return res, fmt.Errorf("no request succeeded: %s", res.FirstError)
	}
	return res, nil
}

// preload registers n instances with ids prefix+digits into services
// svcPrefix0, svcPrefix1, ... of 1000 instances each, in batches of 500 from
// a few goroutines, untimed.
func (r *run) preload(ctx context.Context, name, svcPrefix, prefix string, n, ttl int) error {
	const size, perService = 500, 1000
	f := r.family(prefix)
	conns := max(1, r.cfg.BatchConns)
	bar := report.NewBar(r.cfg.Progress, name, int64(n))
	defer bar.Finish()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := r.caller()
			defer c.close()
			for ctx.Err() == nil {
				base := next.Add(size) - size
				if base >= int64(n) {
					return
				}
				k := min(size, n-int(base))
				// One service per perService instances; size divides perService.
				t := newTemplate(r.cfg.Namespace, svcPrefix+strconv.FormatInt(base/perService, 10), prefix, k, ttl)
				t.set(uint64(base))
				if _, err := c.send(ctx, http.MethodPost, r.base+"/v1/instances", t.body); err != nil {
					errs[g] = err
					return
				}
				bar.Add(int64(k))
			}
		}()
	}
	wg.Wait()
	// The family is contiguous only if every batch landed; cleanup tolerates
	// ids that were never registered (they come back as not_found).
	f.n.Store(min(next.Load(), int64(n)))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}
