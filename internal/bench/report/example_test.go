package report_test

import (
	"context"
	"os"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// A scenario times its requests, summarizes them and prints one object
// whose keys carry their units. Progress goes to a separate writer (stderr
// in the CLI); nil keeps it quiet.
func Example() {
	ctx := context.Background()
	bar := report.NewBar(nil, "requests", 4)
	cpu := report.StartCPU(ctx, nil) // no server: loader CPU only
	var lat []time.Duration
	for _, d := range []time.Duration{3, 1, 2, 10} {
		lat = append(lat, d*time.Millisecond) // a real scenario times a request here
		bar.Add(1)
	}
	bar.Finish()
	s := report.Summarize(lat)
	res := struct {
		Requests int     `json:"requests"`
		P50Ms    float64 `json:"p50_ms"`
		MaxMs    float64 `json:"max_ms"`
		report.CPU
	}{Requests: len(lat), P50Ms: s.P50Ms, MaxMs: s.MaxMs, CPU: cpu.Stop(ctx)}
	res.LoaderCPUSeconds = 0 // varies from run to run
	if err := report.Print(os.Stdout, res); err != nil {
		panic(err)
	}
	// Output:
	// {
	//   "requests": 4,
	//   "p50_ms": 2,
	//   "max_ms": 10,
	//   "loader_cpu_seconds": 0
	// }
}
