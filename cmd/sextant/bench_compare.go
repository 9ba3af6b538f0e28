package main

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/sextant-mesh/sextant/internal/bench/registry"
	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// compareFlags ask "bench registry" to measure two servers side by side.
type compareFlags struct {
	server string
	token  string
	rounds int
}

// compareFigure is one scenario's figure on both servers, per round and
// as medians, with B/A ratios.
type compareFigure struct {
	Unit        string    `json:"unit"`
	APerSecond  []float64 `json:"a_per_second"`
	BPerSecond  []float64 `json:"b_per_second"`
	AMedian     float64   `json:"a_median_per_second"`
	BMedian     float64   `json:"b_median_per_second"`
	Ratios      []float64 `json:"b_over_a_per_round"`
	MedianRatio float64   `json:"b_over_a_median_ratio"`
	AP99Ms      float64   `json:"a_median_p99_ms"`
	BP99Ms      float64   `json:"b_median_p99_ms"`
	// Server CPU per item (from each server's /metrics): less sensitive
	// than throughput to what else the shared machine runs.
	ACPUus   []float64 `json:"a_server_cpu_us_per_item"`
	BCPUus   []float64 `json:"b_server_cpu_us_per_item"`
	CPURatio float64   `json:"b_over_a_median_server_cpu_ratio,omitempty"`
	Errors   int64     `json:"errors"`
}

type compareResult struct {
	A, B      string                    `json:"-"`
	Servers   map[string]string         `json:"servers"`
	Rounds    int                       `json:"rounds"`
	Order     []string                  `json:"order"`
	Scenarios map[string]*compareFigure `json:"scenarios"`
	Note      string                    `json:"note"`
}

// compareRegistry runs the scenarios on server A (cfg.Server) and B
// (c.server) in alternating order (A B, B A, A B, ...) so that a drift of
// the shared machine's load falls on both, and prints the medians and the
// B/A ratios as one JSON object.
func compareRegistry(ctx context.Context, cfg registry.Config, c compareFlags, out io.Writer) error {
	if c.rounds < 1 {
		return fmt.Errorf("--rounds %d: want at least 1", c.rounds)
	}
	cfgB := cfg
	cfgB.Server, cfgB.Token = c.server, c.token
	res := compareResult{Servers: map[string]string{"a": cfg.Server, "b": c.server}, Rounds: c.rounds, Scenarios: map[string]*compareFigure{},
		Note: "per_second figures of each round; ratios are B/A of the same round; load generator and servers share this machine"}
	p99 := map[string][2][]float64{}
	for round := range c.rounds {
		order := []string{"a", "b"}
		if round%2 == 1 {
			order = []string{"b", "a"}
		}
		got := map[string]registry.Result{}
		for _, who := range order {
			run := cfg
			if who == "b" {
				run = cfgB
			}
			r, err := registry.Run(ctx, run, io.Discard)
			if err != nil {
				return fmt.Errorf("round %d, server %s: %w", round+1, who, err)
			}
			got[who] = r
			res.Order = append(res.Order, who)
		}
		for name, pair := range throughputs(got["a"], got["b"]) {
			f := res.Scenarios[name]
			if f == nil {
				f = &compareFigure{Unit: pair[0].Unit}
				res.Scenarios[name] = f
			}
			f.APerSecond = append(f.APerSecond, pair[0].PerSecond)
			f.BPerSecond = append(f.BPerSecond, pair[1].PerSecond)
			if pair[0].PerSecond > 0 {
				f.Ratios = append(f.Ratios, report.Round3(pair[1].PerSecond/pair[0].PerSecond))
			}
			f.Errors += pair[0].Errors + pair[1].Errors
			if ca, cb := cpuPerItem(pair[0]), cpuPerItem(pair[1]); ca > 0 && cb > 0 {
				f.ACPUus, f.BCPUus = append(f.ACPUus, ca), append(f.BCPUus, cb)
			}
			q := p99[name]
			q[0], q[1] = append(q[0], pair[0].P99Ms), append(q[1], pair[1].P99Ms)
			p99[name] = q
		}
	}
	for name, f := range res.Scenarios {
		f.AMedian, f.BMedian = report.Round3(median(f.APerSecond)), report.Round3(median(f.BPerSecond))
		f.MedianRatio = report.Round3(median(f.Ratios))
		f.AP99Ms, f.BP99Ms = report.Round3(median(p99[name][0])), report.Round3(median(p99[name][1]))
		if len(f.ACPUus) > 0 {
			f.CPURatio = report.Round3(median(f.BCPUus) / median(f.ACPUus))
		}
	}
	return report.Print(out, res)
}

// throughputs pairs the throughput scenarios that ran on both servers.
func throughputs(a, b registry.Result) map[string][2]*registry.Throughput {
	out := map[string][2]*registry.Throughput{}
	for name, pair := range map[string][2]*registry.Throughput{
		"register": {a.Register, b.Register}, "batch": {a.Batch, b.Batch},
		"heartbeat": {a.Heartbeat, b.Heartbeat}, "query": {a.Query, b.Query},
	} {
		if pair[0] != nil && pair[1] != nil {
			out[name] = pair
		}
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuPerItem is the server's CPU microseconds per item of a scenario, or 0
// when its /metrics gave no CPU figure.
func cpuPerItem(t *registry.Throughput) float64 {
	if t.ServerCPUSeconds == nil || t.Items == 0 {
		return 0
	}
	return report.Round3(*t.ServerCPUSeconds / float64(t.Items) * 1e6)
}
