// Package report is the part every load generator behind "sextant bench
// ..." shares, like etcd's tools/benchmark/pkg/report: latency percentiles,
// the CPU time of the loader and of the server it drives, progress bars on
// stderr, and the printing of the one JSON object of figures.
//
// Each scenario lives in its own package beside this one (registry,
// callstore, balancer, ...) and owns its load loop, its configuration and
// its result type, whose JSON keys name each figure with its unit. report
// owns no load and starts no server: scenario tests start the real server
// stack with internal/httpapi/apitest. Nothing here is safe to call on a hot
// path per request except Bar.Add; hot loops count in an atomic and let a
// PollBar read it.
//
// A scenario using it:
//
//	type Result struct {
//		Requests  int64   `json:"requests"`
//		PerSecond float64 `json:"per_second"`
//		P50Ms     float64 `json:"p50_ms"`
//		P99Ms     float64 `json:"p99_ms"`
//		report.CPU        // loader_cpu_seconds, server_cpu_seconds
//	}
//
//	func Run(ctx context.Context, cfg Config, out io.Writer) (Result, error) {
//		bar := report.NewTimeBar(ctx, cfg.Progress, "query", cfg.Duration)
//		defer bar.Finish() // stops its goroutine on every return
//		cpu := report.StartCPU(ctx, report.MetricsCPU(httpClient, cfg.Server+"/metrics"))
//		start := time.Now()
//		var lat []time.Duration
//		for time.Since(start) < cfg.Duration && ctx.Err() == nil {
//			t0 := time.Now()
//			if err := query(ctx); err != nil {
//				return Result{}, fmt.Errorf("bench: query: %w", err)
//			}
//			lat = append(lat, time.Since(t0))
//		}
//		elapsed := time.Since(start)
//		bar.Finish() // clear the line before printing
//		s := report.Summarize(lat)
//		res := Result{Requests: int64(len(lat)), P50Ms: s.P50Ms, P99Ms: s.P99Ms, CPU: cpu.Stop(ctx)}
//		res.PerSecond = report.Round3(float64(len(lat)) / elapsed.Seconds())
//		return res, report.Print(out, res)
//	}
//
// A scenario's test pins its keys with CompareKeys and a golden file in its
// testdata, so that no refactoring renames a figure that scripts and
// docs/benchmarks.md read; it runs the scenario in a tiny size against the
// real parts, so that the bench itself never rots.
package report
