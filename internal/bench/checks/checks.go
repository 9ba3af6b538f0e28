// Package checks is the "sextant bench checks" scenario: what a server's
// active health checks cost. It serves the checks' HTTP targets from this
// (the loader's) process, registers instances with an HTTP check each on a
// running server, and measures the server's CPU over a window twice: with
// the instances registered without checks (the idle floor), then with
// their checks running.
package checks

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// Config is the scenario's.
type Config struct {
	Server    string        // the server's base URL
	Instances int           // instances, one HTTP check each
	Interval  time.Duration // the checks' interval
	Window    time.Duration // each measurement's length
	Listeners int           // target listeners (spreads loopback ports)
	Progress  io.Writer     // progress bars (nil: none)
}

// Result is the scenario's figures.
type Result struct {
	Instances           int     `json:"instances"`
	IntervalSeconds     float64 `json:"interval_s"`
	WindowSeconds       float64 `json:"window_s"`
	ProbesPerS          float64 `json:"probes_per_s"`
	ExpectedProbesPerS  float64 `json:"expected_probes_per_s"`
	IdleServerCPU       float64 `json:"idle_server_cpu_seconds"`
	ChecksServerCPU     float64 `json:"checks_server_cpu_seconds"`
	ServerCores         float64 `json:"server_cores"`
	ServerCoresNet      float64 `json:"server_cores_net"`
	ServerCPUSPerMinute float64 `json:"server_cpu_s_per_min"`
	CheckWritesInWindow float64 `json:"check_writes_in_window"`
	TargetCPUSeconds    float64 `json:"target_cpu_seconds"`
	LoadAvg             string  `json:"load_avg"`
}

const namespace = "bench-checks"

// Run runs the scenario and deregisters what it registered.
func Run(ctx context.Context, cfg Config) (Result, error) {
	res := Result{Instances: cfg.Instances, IntervalSeconds: cfg.Interval.Seconds(), WindowSeconds: cfg.Window.Seconds(),
		ExpectedProbesPerS: float64(cfg.Instances) / cfg.Interval.Seconds()}
	c, err := client.New(cfg.Server)
	if err != nil {
		return res, err
	}
	var probes atomic.Int64
	seen := make([]atomic.Bool, cfg.Instances)
	var seenN atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		if i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/h/")); err == nil && i >= 0 && i < len(seen) && !seen[i].Swap(true) {
			seenN.Add(1)
		}
		w.Write([]byte("ok"))
	})
	var addrs []string
	for range max(cfg.Listeners, 1) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	instances := func(withChecks bool) []client.Instance {
		out := make([]client.Instance, cfg.Instances)
		for i := range out {
			out[i] = client.Instance{ID: fmt.Sprintf("bench-check-%06d", i), Namespace: namespace, Service: "checked",
				Host: "127.0.0.1", Port: 10000 + i%50000}
			if withChecks {
				out[i].Checks = []client.Check{{Type: "http", Target: "http://" + addrs[i%len(addrs)] + "/h/" + strconv.Itoa(i),
					Interval: client.Duration(cfg.Interval), Timeout: client.Duration(min(cfg.Interval, 5*time.Second))}}
			}
		}
		return out
	}
	register := func(ins []client.Instance) error {
		for i := 0; i < len(ins); i += 1000 {
			if _, err := c.Register(ctx, ins[i:min(i+1000, len(ins))]...); err != nil {
				return err
			}
		}
		return nil
	}
	defer func() {
		ids := make([]string, 0, 1000)
		for i := range cfg.Instances {
			ids = append(ids, fmt.Sprintf("bench-check-%06d", i))
			if len(ids) == 1000 || i == cfg.Instances-1 {
				c.Deregister(context.WithoutCancel(ctx), ids...)
				ids = ids[:0]
			}
		}
	}()
	cpu := report.MetricsCPU(http.DefaultClient, strings.TrimSuffix(cfg.Server, "/")+"/metrics")
	measure := func(desc string) (float64, error) {
		if cfg.Progress != nil {
			bar := report.NewTimeBar(ctx, cfg.Progress, desc, cfg.Window)
			defer bar.Finish()
		}
		m := report.StartCPU(ctx, cpu)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(cfg.Window):
		}
		got := m.Stop(ctx)
		if got.ServerCPUSeconds == nil {
			return 0, fmt.Errorf("bench checks: the server's /metrics gave no process_cpu_seconds_total")
		}
		return *got.ServerCPUSeconds, nil
	}
	// The floor: the same instances without checks, the server idle.
	if err := register(instances(false)); err != nil {
		return res, fmt.Errorf("bench checks: register: %w", err)
	}
	if res.IdleServerCPU, err = measure("idle, no checks"); err != nil {
		return res, err
	}
	// With checks: every target probed once, then one more interval
	// (the first probes, and the writes of the checks turning passing).
	if err := register(instances(true)); err != nil {
		return res, fmt.Errorf("bench checks: register with checks: %w", err)
	}
	warm := time.Now()
	for seenN.Load() < int64(cfg.Instances) {
		if time.Since(warm) > 3*cfg.Interval+time.Minute {
			return res, fmt.Errorf("bench checks: only %d of %d targets probed after %v", seenN.Load(), cfg.Instances, time.Since(warm))
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(cfg.Interval):
	}
	writes0 := metric(cfg.Server, "sextant_health_check_writes_total")
	p0, t0 := probes.Load(), report.ProcessCPU()
	start := time.Now()
	if res.ChecksServerCPU, err = measure("with checks"); err != nil {
		return res, err
	}
	res.ProbesPerS = report.Round3(float64(probes.Load()-p0) / time.Since(start).Seconds())
	res.TargetCPUSeconds = report.Round3(report.ProcessCPU() - t0)
	res.CheckWritesInWindow = metric(cfg.Server, "sextant_health_check_writes_total") - writes0
	w := cfg.Window.Seconds()
	res.ServerCores = report.Round3(res.ChecksServerCPU / w)
	res.ServerCoresNet = report.Round3((res.ChecksServerCPU - res.IdleServerCPU) / w)
	res.ServerCPUSPerMinute = report.Round3(res.ChecksServerCPU / w * 60)
	res.LoadAvg = report.LoadAvgText()
	return res, nil
}

// metric sums the samples of a metric family on the server's /metrics.
func metric(server, name string) float64 {
	resp, err := http.Get(strings.TrimSuffix(server, "/") + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Fields(line); len(f) == 2 {
			v, _ := strconv.ParseFloat(f[1], 64)
			sum += v
		}
	}
	return sum
}
