package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// registryHolds sums the instances of every service in every namespace.
func (r *run) registryHolds(ctx context.Context) (int, error) {
	ns, err := r.c.Namespaces(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, n := range ns.Namespaces {
		s, err := r.c.Services(ctx, n)
		if err != nil {
			return 0, err
		}
		for _, svc := range s.Services {
			total += svc.Instances
		}
	}
	return total, nil
}

// changes runs the scenario: with ChangesTotal instances held, the time to
// read an answer of GET /v1/changes carrying ChangesCount changes.
func (r *run) changes(ctx context.Context) (*Latency, error) {
	holds, err := r.registryHolds(ctx)
	if err != nil {
		return nil, err
	}
	res := &Latency{Rounds: r.cfg.ChangesRounds, TargetP99Ms: 20}
	if missing := r.cfg.ChangesTotal - holds; missing > 0 {
		if err := r.preload(ctx, "changes preload", "pre-", "pre-", missing, 0); err != nil {
			return nil, fmt.Errorf("preload: %w", err)
		}
		res.Preloaded = missing
		holds += missing
	}
	res.RegistryHolds = holds
	ns, err := r.c.Namespaces(ctx)
	if err != nil {
		return nil, err
	}
	since := ns.Revision
	if err := r.preload(ctx, "changes", "chg-", "chg-", r.cfg.ChangesCount, 0); err != nil {
		return nil, fmt.Errorf("registering changes: %w", err)
	}
	target := r.base + "/v1/changes?since=" + strconv.FormatUint(since, 10) + "&limit=10000"
	c := r.caller()
	defer c.close()
	if _, err := c.send(ctx, http.MethodGet, target, nil); err != nil {
		return nil, err
	}
	var feed client.ChangesResult
	if err := json.Unmarshal(c.buf, &feed); err != nil {
		return nil, fmt.Errorf("decoding changes: %w", err)
	}
	res.ChangesReturned, res.BodyBytes = len(feed.Changes), int64(len(c.buf))
	if len(feed.Changes) < r.cfg.ChangesCount {
		return nil, fmt.Errorf("changes since %d: got %d, want at least %d", since, len(feed.Changes), r.cfg.ChangesCount)
	}
	bar := report.NewBar(r.cfg.Progress, "changes reads", int64(r.cfg.ChangesRounds))
	defer bar.Finish()
	lat := make([]time.Duration, 0, r.cfg.ChangesRounds)
	cpu := r.startCPU(ctx)
	for range r.cfg.ChangesRounds {
		t0 := time.Now()
		if _, err := c.send(ctx, http.MethodGet, target, nil); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
		bar.Add(1)
	}
	res.CPU = cpu.Stop(ctx)
	sum := report.Summarize(lat)
	res.P50Ms, res.P99Ms, res.MaxMs = sum.P50Ms, sum.P99Ms, sum.MaxMs
	res.Note = "time to read the whole answer of GET /v1/changes?since=R&limit=10000, not decoded"
	return res, nil
}
