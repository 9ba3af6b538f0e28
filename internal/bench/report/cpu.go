package report

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU is the CPU time the loader and the server spent in the timed part of
// a scenario. They share the machine, so this says who used the cores.
// Embedded in a result, its keys print inline.
type CPU struct {
	LoaderCPUSeconds float64 `json:"loader_cpu_seconds"`
	// ServerCPUSeconds is left out when the server's figure is unknown.
	ServerCPUSeconds *float64 `json:"server_cpu_seconds,omitempty"`
}

// ServerCPU reads the total CPU seconds of the server under load; ok is
// false when it cannot tell. It is called by the goroutine that calls
// StartCPU and CPUMeter.Stop, and may block on the network until ctx ends.
type ServerCPU func(ctx context.Context) (seconds float64, ok bool)

// MetricsCPU reads process_cpu_seconds_total from a Prometheus text
// endpoint such as a Sextant server's /metrics.
func MetricsCPU(c *http.Client, metricsURL string) ServerCPU {
	return func(ctx context.Context) (float64, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
		if err != nil {
			return 0, false
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, false
		}
		return ProcessCPUFromMetrics(resp.Body)
	}
}

// ProcessCPUFromMetrics finds process_cpu_seconds_total in a Prometheus
// text exposition, for a scenario that fetches /metrics its own way.
func ProcessCPUFromMetrics(r io.Reader) (float64, bool) {
	const name = "process_cpu_seconds_total "
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte(name)); ok {
			f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// CPUMeter measures the CPU time between StartCPU and Stop. It is a value
// owned by one goroutine.
type CPUMeter struct {
	server        ServerCPU
	loader, start float64
	serverOK      bool
}

// StartCPU starts measuring this process's CPU time and, with a non-nil
// server, the server's.
func StartCPU(ctx context.Context, server ServerCPU) CPUMeter {
	m := CPUMeter{server: server, loader: ProcessCPU()}
	if server != nil {
		m.start, m.serverOK = server(ctx)
	}
	return m
}

// Stop returns the CPU seconds spent since StartCPU, rounded to the
// millisecond; ServerCPUSeconds is nil unless both readings of the server
// succeeded.
func (m CPUMeter) Stop(ctx context.Context) CPU {
	c := CPU{LoaderCPUSeconds: Round3(ProcessCPU() - m.loader)}
	if m.serverOK {
		if s, ok := m.server(ctx); ok {
			d := Round3(s - m.start)
			c.ServerCPUSeconds = &d
		}
	}
	return c
}

// ProcessCPU is this process's user+system CPU time in seconds (0 when the
// kernel does not say).
func ProcessCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// MaxRSS is this process's peak resident set size in bytes (0 when the
// kernel does not say).
func MaxRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Maxrss * 1024 // Linux reports KiB
}

// LoadAvg is the machine's 1, 5 and 15 minute load averages from
// /proc/loadavg (zeros where it is missing): the figures are only as quiet
// as the machine was.
func LoadAvg() [3]float64 {
	var l [3]float64
	for i, f := range loadAvgFields() {
		l[i], _ = strconv.ParseFloat(f, 64)
	}
	return l
}

// LoadAvgText is LoadAvg as /proc/loadavg writes it ("0.52 0.58 0.59"),
// or "" where it is missing.
func LoadAvgText() string {
	f := loadAvgFields()
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f, " ")
}

// loadAvgFields is the first three fields of /proc/loadavg, or fewer
// where it is missing or short.
func loadAvgFields() []string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	return f[:min(3, len(f))]
}
