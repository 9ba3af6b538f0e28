package gateway

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"
)

// perClient is the fixed-rate figures' requests/s per connection.
func (cfg DataplaneConfig) perClient() int { return max(1, cfg.Rate/cfg.RateConnections) }

// loadRate runs h2load over HTTP/1.1 at the fixed rate against u and reads
// each request's time from its log (h2load prints no percentiles).
func (cfg DataplaneConfig) loadRate(ctx context.Context, u string, header []string, cpu int) (wrkResult, error) {
	log, err := os.CreateTemp("", "sextant-bench-h2load-*.log")
	if err != nil {
		return wrkResult{}, err
	}
	log.Close()
	defer os.Remove(log.Name())
	secs := strconv.Itoa(max(int(cfg.Duration.Seconds()), 1))
	args := cfg.pin(cpu, append(append([]string{"h2load", "--h1", "-t1", "-c", strconv.Itoa(cfg.RateConnections),
		"--rps", strconv.Itoa(cfg.perClient()), "-D", secs, "--log-file", log.Name()}, header...), u)...)
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("%w: %s", err, out)
	}
	w, err := parseH2load(string(out))
	if err != nil {
		return w, err
	}
	b, err := os.ReadFile(log.Name())
	if err != nil {
		return w, err
	}
	// The first second's requests (connections opening; a quarter of a
	// shorter run) count for CPU per request but not for latency.
	p50, p99, err := parseH2loadLog(b, min(time.Second, cfg.Duration/4))
	w.p50, w.p99 = p50, p99
	return w, err
}

// parseH2loadLog reads h2load's --log-file (per request: start time in us
// since the epoch, status, time to the end of the answer in us) into the
// p50 and p99 in ms of the 2xx answers to requests started skip or more
// after the first.
func parseH2loadLog(b []byte, skip time.Duration) (p50, p99 float64, err error) {
	type req struct{ start, us float64 }
	var reqs []req
	first := math.Inf(1)
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		var start, status, us float64
		var errs [3]error
		if len(f) == 3 {
			start, errs[0] = strconv.ParseFloat(string(f[0]), 64)
			status, errs[1] = strconv.ParseFloat(string(f[1]), 64)
			us, errs[2] = strconv.ParseFloat(string(f[2]), 64)
		}
		if len(f) != 3 || errs != [3]error{} || us < 0 {
			return 0, 0, fmt.Errorf("bench: h2load log line %q: want start, status, microseconds", bytes.TrimSpace(line))
		}
		first = min(first, start)
		if status >= 200 && status < 300 {
			reqs = append(reqs, req{start, us})
		}
	}
	var us []float64
	for _, r := range reqs {
		if r.start-first >= float64(skip.Microseconds()) {
			us = append(us, r.us)
		}
	}
	if len(us) == 0 {
		return 0, 0, fmt.Errorf("bench: h2load logged no 2xx answer after its first %v (%d in all)", skip, len(reqs))
	}
	slices.Sort(us)
	at := func(q float64) float64 { return round3(us[min(len(us)-1, int(q*float64(len(us))))] / 1000) }
	return at(0.50), at(0.99), nil
}
