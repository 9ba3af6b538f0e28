// Package compat is "sextant bench compat": the same Consul HTTP API load
// against Sextant's Consul-compatible API (--consul-api) and, when given, a
// peer that speaks Consul's API (a Consul agent), in alternating rounds:
// registers and deregisters from many clients, health reads of a service of
// 100 instances, the wake-up latency of a blocking query after a change, and
// the same for Consul KV: puts, gets, and a watch parked on each of 1,000
// keys (kv.go).
// It speaks raw HTTP as Consul's clients do (PUT bodies of Consul's shape,
// X-Consul-Index), prints one JSON object of medians and peer/Sextant
// ratios, and owns no server state.
package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// Config is a run; zero values are the defaults.
type Config struct {
	// Server is Sextant's --consul-api address (host:port); Peer, if set,
	// another Consul API (a Consul agent) measured the same way.
	Server, Peer string
	// Token is sent as X-Consul-Token to both (empty: none).
	Token string
	// Metrics, if set, is Sextant's /metrics URL (on --http): the server's
	// CPU per request is read from it, steadier than throughput on a
	// shared machine.
	Metrics string
	// Clients is the number of concurrent clients (default 64).
	Clients int
	// Duration is how long each throughput scenario runs per round
	// (default 5s).
	Duration time.Duration
	// Instances is the size of the service health reads read (default 100).
	Instances int
	// Wakes is the number of blocking-query wake-ups timed per round
	// (default 200).
	Wakes int
	// Rounds alternate the servers: A B, B A, ... (default 3).
	Rounds int
	// KVKeys is the number of KV keys read and watched (default 1000).
	KVKeys int
	// KVWatchServer, if set, is another server of Sextant's cluster
	// (its --consul-api) the KV watchers park on while the puts go to
	// Server: the wake then crosses the shared store.
	KVWatchServer string
	// Progress receives progress bars (nil: none).
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.Clients <= 0 {
		c.Clients = 64
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Instances <= 0 {
		c.Instances = 100
	}
	if c.Wakes <= 0 {
		c.Wakes = 200
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.KVKeys <= 0 {
		c.KVKeys = 1000
	}
}

// Figure is one scenario's result on one server: per-round values and
// their median.
type Figure struct {
	PerRound []float64 `json:"per_round"`
	Median   float64   `json:"median"`
}

// ServerResult is every figure of one server.
type ServerResult struct {
	Addr                   string `json:"addr"`
	RegisterDeregisterPerS Figure `json:"register_deregister_per_s"`
	HealthPassingPerS      Figure `json:"health_passing_per_s"`
	WakeP50Ms              Figure `json:"blocking_wake_p50_ms"`
	WakeP99Ms              Figure `json:"blocking_wake_p99_ms"`
	// Server CPU per register+deregister pair and per health read, in
	// microseconds (Sextant with Config.Metrics only).
	RegisterCPUus *Figure `json:"server_cpu_us_per_register_deregister,omitempty"`
	HealthCPUus   *Figure `json:"server_cpu_us_per_health_read,omitempty"`
	// Consul KV (kv.go): puts and gets per second, the server's CPU per
	// op, and the wake of a watch parked on each of Config.KVKeys keys.
	KVPutPerS   Figure  `json:"kv_put_per_s"`
	KVGetPerS   Figure  `json:"kv_get_per_s"`
	KVPutCPUus  *Figure `json:"server_cpu_us_per_kv_put,omitempty"`
	KVGetCPUus  *Figure `json:"server_cpu_us_per_kv_get,omitempty"`
	KVWakeP50Ms Figure  `json:"kv_watch_wake_p50_ms"`
	KVWakeP99Ms Figure  `json:"kv_watch_wake_p99_ms"`
	// KVOtherWakes counts watchers answered without a change of their
	// own key (woken by another key's put), over every round.
	KVOtherWakes int64 `json:"kv_watch_other_wakes"`
	Errors       int64 `json:"errors"`
}

// Result is what Run prints.
type Result struct {
	Sextant ServerResult  `json:"sextant"`
	Peer    *ServerResult `json:"peer,omitempty"`
	// Ratios are Sextant over the peer (throughput) and the peer over
	// Sextant (latency): above 1, Sextant is ahead.
	Ratios map[string]float64 `json:"sextant_advantage,omitempty"`
	// KVVsInstances sets Sextant's KV figures beside its instance
	// figures of the same rounds (a put against one instance write, CPU
	// against CPU, a KV watch's wake against a health query's).
	KVVsInstances map[string]float64 `json:"kv_vs_instances"`
	// KVWatchServer is where the blocking queries waited, when not on Sextant's
	// server itself.
	KVWatchServer string `json:"kv_watch_server,omitempty"`
	Clients       int    `json:"clients"`
	Instances     int    `json:"instances"`
	Rounds        int    `json:"rounds"`
	Note          string `json:"note"`
}

// Run measures and prints the result on out as one JSON object.
func Run(ctx context.Context, cfg Config, out io.Writer) (Result, error) {
	cfg.defaults()
	if cfg.Server == "" {
		return Result{}, errors.New("compat: no server: give Sextant's --consul-api address")
	}
	res := Result{Sextant: ServerResult{Addr: cfg.Server}, Clients: cfg.Clients, Instances: cfg.Instances, Rounds: cfg.Rounds,
		Note: "the load generator and the servers share this machine (" + report.LoadAvgText() + "); medians of alternating rounds"}
	targets := []*target{newTarget(cfg.Server, cfg.Token, cfg.Clients, &res.Sextant)}
	if cfg.KVWatchServer != "" {
		targets[0].watchBase = "http://" + cfg.KVWatchServer
		res.KVWatchServer = cfg.KVWatchServer
	}
	if cfg.Metrics != "" {
		targets[0].cpu = report.MetricsCPU(&http.Client{Timeout: 10 * time.Second}, cfg.Metrics)
		res.Sextant.RegisterCPUus, res.Sextant.HealthCPUus = &Figure{}, &Figure{}
		res.Sextant.KVPutCPUus, res.Sextant.KVGetCPUus = &Figure{}, &Figure{}
	}
	if cfg.Peer != "" {
		res.Peer = &ServerResult{Addr: cfg.Peer}
		targets = append(targets, newTarget(cfg.Peer, cfg.Token, cfg.Clients, res.Peer))
	}
	for _, t := range targets {
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			t.cleanupKV(ctx)
		}()
		if err := t.prepare(ctx, cfg.Instances); err != nil {
			return res, err
		}
		defer t.cleanup(cfg.Instances)
		if err := t.prepareKV(ctx, cfg.KVKeys); err != nil {
			return res, err
		}
	}
	for round := range cfg.Rounds {
		order := slices.Clone(targets)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			if err := t.round(ctx, cfg, round); err != nil {
				return res, err
			}
		}
	}
	for _, t := range targets {
		for _, f := range []*Figure{&t.res.RegisterDeregisterPerS, &t.res.HealthPassingPerS, &t.res.WakeP50Ms, &t.res.WakeP99Ms, t.res.RegisterCPUus, t.res.HealthCPUus,
			&t.res.KVPutPerS, &t.res.KVGetPerS, t.res.KVPutCPUus, t.res.KVGetCPUus, &t.res.KVWakeP50Ms, &t.res.KVWakeP99Ms} {
			if f != nil {
				f.Median = report.Round3(median(f.PerRound))
			}
		}
		t.res.Errors = t.errors.Load()
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return report.Round3(a / b)
	}
	// KV beside Sextant's own instance writes of the same rounds: a KV put
	// is one write, a register+deregister pair two.
	sx := res.Sextant
	res.KVVsInstances = map[string]float64{
		"kv_put_per_s_over_instance_writes_per_s": ratio(sx.KVPutPerS.Median, 2*sx.RegisterDeregisterPerS.Median),
		"kv_watch_wake_p99_over_health_wake_p99":  ratio(sx.KVWakeP99Ms.Median, sx.WakeP99Ms.Median),
	}
	if sx.KVPutCPUus != nil {
		res.KVVsInstances["kv_put_cpu_over_instance_write_cpu"] = ratio(sx.KVPutCPUus.Median, sx.RegisterCPUus.Median/2)
		res.KVVsInstances["kv_get_cpu_over_health_read_cpu"] = ratio(sx.KVGetCPUus.Median, sx.HealthCPUus.Median)
	}
	if res.Peer != nil {
		res.Ratios = map[string]float64{
			"register_deregister":  ratio(res.Sextant.RegisterDeregisterPerS.Median, res.Peer.RegisterDeregisterPerS.Median),
			"health_passing":       ratio(res.Sextant.HealthPassingPerS.Median, res.Peer.HealthPassingPerS.Median),
			"blocking_wake_p99":    ratio(res.Peer.WakeP99Ms.Median, res.Sextant.WakeP99Ms.Median),
			"blocking_wake_median": ratio(res.Peer.WakeP50Ms.Median, res.Sextant.WakeP50Ms.Median),
			"kv_put":               ratio(res.Sextant.KVPutPerS.Median, res.Peer.KVPutPerS.Median),
			"kv_get":               ratio(res.Sextant.KVGetPerS.Median, res.Peer.KVGetPerS.Median),
			"kv_watch_wake_p99":    ratio(res.Peer.KVWakeP99Ms.Median, res.Sextant.KVWakeP99Ms.Median),
		}
	}
	return res, report.Print(out, res)
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

// target is one server under load.
type target struct {
	base      string
	watchBase string // where KV watchers park ("": base)
	token     string
	hc        *http.Client
	res       *ServerResult
	cpu       report.ServerCPU // nil: the server's CPU is not read
	errors    atomic.Int64
	// lastErr is the first error seen, for the message of a run that
	// fails as a whole.
	mu      sync.Mutex
	lastErr error
}

func newTarget(addr, token string, clients int, res *ServerResult) *target {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        clients * 2,
		MaxIdleConnsPerHost: clients * 2,
		IdleConnTimeout:     time.Minute,
	}
	return &target{base: "http://" + addr, token: token, hc: &http.Client{Transport: tr, Timeout: 2 * time.Minute}, res: res}
}

// do sends one request; an answer other than 200 is an error. It returns
// the X-Consul-Index of the answer.
func (t *target) do(ctx context.Context, method, path string, body []byte) (uint64, error) {
	idx, _, err := t.call(ctx, method, path, body)
	return idx, err
}

// get reads path's answer.
func (t *target) get(ctx context.Context, path string) ([]byte, error) {
	_, b, err := t.call(ctx, "GET", path, nil)
	return b, err
}

func (t *target) call(ctx context.Context, method, path string, body []byte) (uint64, []byte, error) {
	return t.callAt(ctx, t.base, method, path, body)
}

// watchAt is where blocking queries wait: Config.KVWatchServer, or the
// server itself.
func (t *target) watchAt() string {
	if t.watchBase != "" {
		return t.watchBase
	}
	return t.base
}

func (t *target) callAt(ctx context.Context, base, method, path string, body []byte) (uint64, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if t.token != "" {
		req.Header.Set("X-Consul-Token", t.token)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil, fmt.Errorf("compat: %s %s%s: %s: %s", method, base, path, resp.Status, bytes.TrimSpace(b))
	}
	idx, _ := strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
	return idx, b, nil
}

func (t *target) fail(err error) {
	t.errors.Add(1)
	t.mu.Lock()
	if t.lastErr == nil {
		t.lastErr = err
	}
	t.mu.Unlock()
}

func registerBody(id, name string, port int, meta string) []byte {
	return []byte(`{"ID":"` + id + `","Name":"` + name + `","Address":"127.0.0.1","Port":` + strconv.Itoa(port) +
		`,"Tags":["bench","v1"],"Meta":{"env":"bench","rev":"` + meta + `"}}`)
}

// readService and wakeService are the services the reads and the
// blocking queries use; the registers use registerService.
const (
	readService     = "bench-compat-read"
	wakeService     = "bench-compat-wake"
	registerService = "bench-compat-reg"
)

// prepare registers the service health reads read and the one blocking
// queries wait on.
func (t *target) prepare(ctx context.Context, instances int) error {
	for i := range instances {
		if _, err := t.do(ctx, "PUT", "/v1/agent/service/register", registerBody(readService+"-"+strconv.Itoa(i), readService, 20000+i, "0")); err != nil {
			return err
		}
	}
	_, err := t.do(ctx, "PUT", "/v1/agent/service/register", registerBody(wakeService+"-0", wakeService, 30000, "0"))
	return err
}

// cleanup deregisters what prepare registered, and the instances of
// register pairs the end of a round cut in half (best effort: the run's
// figures are printed whatever this answers).
func (t *target) cleanup(instances int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if body, err := t.get(ctx, "/v1/catalog/service/"+registerService); err == nil {
		var left []struct{ ServiceID string }
		json.Unmarshal(body, &left)
		for _, s := range left {
			t.do(ctx, "PUT", "/v1/agent/service/deregister/"+s.ServiceID, nil)
		}
	}
	for i := range instances {
		t.do(ctx, "PUT", "/v1/agent/service/deregister/"+readService+"-"+strconv.Itoa(i), nil)
	}
	t.do(ctx, "PUT", "/v1/agent/service/deregister/"+wakeService+"-0", nil)
}

// round runs every scenario once.
func (t *target) round(ctx context.Context, cfg Config, round int) error {
	bar := report.NewTimeBar(ctx, cfg.Progress, fmt.Sprintf("round %d %s", round+1, t.base), 2*cfg.Duration)
	defer bar.Finish()
	// Each client registers and deregisters its own ids. A pair the end
	// of the round cut in half leaves its instance: cleanup removes it.
	meter := report.StartCPU(ctx, t.cpu)
	regs := t.loop(ctx, cfg, func(ctx context.Context, client, i int) error {
		id := registerService + "-" + strconv.Itoa(round) + "-" + strconv.Itoa(client) + "-" + strconv.Itoa(i)
		if _, err := t.do(ctx, "PUT", "/v1/agent/service/register", registerBody(id, registerService, 40000+client, "0")); err != nil {
			return err
		}
		_, err := t.do(ctx, "PUT", "/v1/agent/service/deregister/"+id, nil)
		return err
	})
	regCPU := meter.Stop(ctx)
	meter = report.StartCPU(ctx, t.cpu)
	reads := t.loop(ctx, cfg, func(ctx context.Context, _, _ int) error {
		_, err := t.do(ctx, "GET", "/v1/health/service/"+readService+"?passing", nil)
		return err
	})
	readCPU := meter.Stop(ctx)
	perOp(t.res.RegisterCPUus, regCPU, regs)
	perOp(t.res.HealthCPUus, readCPU, reads)
	bar.Finish()
	p50, p99, err := t.wakes(ctx, cfg.Wakes, round)
	if err != nil {
		return err
	}
	if n := t.errors.Load(); n > 0 && regs+reads == 0 {
		return fmt.Errorf("compat: %s: every request failed: %w", t.base, t.lastErr)
	}
	t.res.RegisterDeregisterPerS.PerRound = append(t.res.RegisterDeregisterPerS.PerRound, report.Round3(regs/cfg.Duration.Seconds()))
	t.res.HealthPassingPerS.PerRound = append(t.res.HealthPassingPerS.PerRound, report.Round3(reads/cfg.Duration.Seconds()))
	t.res.WakeP50Ms.PerRound = append(t.res.WakeP50Ms.PerRound, p50)
	t.res.WakeP99Ms.PerRound = append(t.res.WakeP99Ms.PerRound, p99)
	return t.roundKV(ctx, cfg, round)
}

// loop runs op from cfg.Clients goroutines for cfg.Duration and returns
// how many succeeded.
func (t *target) loop(ctx context.Context, cfg Config, op func(ctx context.Context, client, i int) error) float64 {
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if err := op(ctx, c, i); err != nil {
					if ctx.Err() == nil {
						t.fail(err)
					}
					continue
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(done.Load())
}

// wakes times n blocking-query wake-ups: a health query waits on the
// service's index, a register changes the service, and the time from the
// register's answer (the change is committed) to the query's answer is
// one sample (0 when the query answered first), as "bench registry"'s
// watch scenario times it.
func (t *target) wakes(ctx context.Context, n, round int) (p50, p99 float64, err error) {
	path := "/v1/health/service/" + wakeService
	idx, _, err := t.callAt(ctx, t.watchAt(), "GET", path, nil)
	if err != nil {
		return 0, 0, err
	}
	lat := make([]time.Duration, 0, n)
	for i := range n {
		type answer struct {
			idx uint64
			at  time.Time
			err error
		}
		ch := make(chan answer, 1)
		go func() {
			got, _, err := t.callAt(ctx, t.watchAt(), "GET", path+"?index="+strconv.FormatUint(idx, 10)+"&wait=30s", nil)
			ch <- answer{got, time.Now(), err}
		}()
		// Let the query reach the server and wait there: a change sent
		// before it arrives would answer it at once, not wake it.
		time.Sleep(2 * time.Millisecond)
		if _, err := t.do(ctx, "PUT", "/v1/agent/service/register", registerBody(wakeService+"-0", wakeService, 30000, strconv.Itoa(round*n+i+1))); err != nil {
			return 0, 0, err
		}
		acked := time.Now()
		a := <-ch
		if a.err != nil {
			return 0, 0, a.err
		}
		if a.idx <= idx {
			return 0, 0, fmt.Errorf("compat: %s: a blocking query answered index %d after a change past %d", t.base, a.idx, idx)
		}
		idx = a.idx
		lat = append(lat, max(a.at.Sub(acked), 0))
	}
	s := report.Summarize(lat)
	return s.P50Ms, s.P99Ms, nil
}
