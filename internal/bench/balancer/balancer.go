// Package balancer is the load-balancing race, "sextant bench balancer":
// it starts the race's providers in-process on loopback (capacities that
// change every phase, from a providers file), keeps a fixed number of calls
// in flight through each policy of internal/balancer and through an oracle
// that knows the true capacities, and prints one JSON object per policy.
// It owns the providers it starts and stops them; the policies are
// internal/balancer's.
package balancer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// Config configures "sextant bench balancer"; zero values are the
// race's defaults.
type Config struct {
	// Providers is the parsed providers file (LoadProviders).
	Providers *ProvidersFile
	// Policies to run, in order; empty: every balancer policy plus "oracle".
	Policies []string
	// Scale divides threads, max_concurrent and the 1024 calls in flight.
	// Default 8.
	Scale int
	// Warmup runs before phase 0 (serving the last phase). Default 3s.
	Warmup time.Duration
	// Phase overrides the file's phase length (tests use short ones).
	Phase time.Duration
	// Timeout bounds one call. Default 2s.
	Timeout time.Duration
	// Seed seeds the service-time draws; every policy gets the same one.
	Seed uint64
	// Progress receives a progress bar (nil: none).
	Progress io.Writer
	// Proxy, when set, sends every call through a proxy that balances
	// itself (the gateway bench): it is given the policy and the providers'
	// addresses and returns the URL to call and how to stop it. The client
	// then picks nothing, and per-provider successes are not known.
	Proxy func(ctx context.Context, policy string, providers []string) (url string, stop func(), err error)
}

// Result is one policy's figures, printed as one JSON object.
type Result struct {
	Policy    string  `json:"policy"`
	Scale     int     `json:"scale"`
	InFlight  int     `json:"in_flight"`
	Seconds   float64 `json:"seconds"`
	Successes int64   `json:"successes"`
	// Rejections are calls the providers refused (all threads busy).
	Rejections int64 `json:"provider_rejections"`
	// Sheds are calls the policy refused at the gateway (ErrShed).
	Sheds    int64   `json:"gateway_sheds"`
	Timeouts int64   `json:"timeouts"`
	Errors   int64   `json:"errors"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	P999Ms   float64 `json:"p999_ms"`
	Ceiling  float64 `json:"ceiling"`
	Ratio    float64 `json:"ratio"`
	// RecoveryMs is, per phase, how long after its start the successes of a
	// 300 ms window first reach 90% of the phase's ceiling rate.
	RecoveryMs       []int64          `json:"recovery_ms"`
	RecoveryMedianMs int64            `json:"recovery_ms_median"`
	RecoveryMaxMs    int64            `json:"recovery_ms_max"`
	PerProvider      map[string]int64 `json:"successes_per_provider"`
}

// binWidth is the resolution of the throughput timeline.
const binWidth = 100 * time.Millisecond

// RunBalancer runs each policy against fresh in-process providers over
// loopback HTTP and writes one JSON line per policy to out.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]Result, error) {
	if cfg.Providers == nil {
		return nil, errors.New("bench: balancer: no providers file")
	}
	if cfg.Scale <= 0 {
		cfg.Scale = 8
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = 3 * time.Second
	}
	if cfg.Phase <= 0 {
		cfg.Phase = time.Duration(cfg.Providers.PhaseSeconds * float64(time.Second))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if len(cfg.Policies) == 0 {
		// The consistent-hash policies are left out: the bench's calls carry
		// no key, so they would pick at random.
		for _, n := range balancer.Names() {
			if n != "ring_hash" && n != "maglev" {
				cfg.Policies = append(cfg.Policies, n)
			}
		}
		cfg.Policies = append(cfg.Policies, "oracle")
	}
	for _, name := range cfg.Policies {
		if name == "oracle" {
			if cfg.Proxy != nil {
				return nil, errors.New("bench: balancer: oracle cannot run behind a proxy")
			}
			continue
		}
		if _, err := balancer.New(name); err != nil {
			return nil, fmt.Errorf("bench: balancer: %w", err)
		}
	}
	enc := json.NewEncoder(out)
	var results []Result
	for _, name := range cfg.Policies {
		r, err := runPolicy(ctx, cfg, name)
		if err != nil {
			return results, err
		}
		results = append(results, r)
		if err := enc.Encode(r); err != nil {
			return results, fmt.Errorf("bench: balancer: write result: %w", err)
		}
	}
	return results, nil
}

// callStats are one client goroutine's counts; merged at the end.
type callStats struct {
	successes, rejections, sheds, timeouts, errors int64
	perProvider                                    []int64
	latencies                                      []time.Duration
}

func runPolicy(ctx context.Context, cfg Config, name string) (Result, error) {
	provs := newSimProviders(cfg.Providers, cfg.Scale, cfg.Seed)
	for i, p := range provs {
		if err := p.start(); err != nil {
			for _, q := range provs[:i] {
				q.stop()
			}
			return Result{}, err
		}
	}
	defer func() {
		for _, p := range provs {
			p.stop()
		}
	}()

	var pol balancer.Policy = &oraclePolicy{providers: provs}
	if name != "oracle" {
		var err error
		if pol, err = balancer.New(name); err != nil {
			return Result{}, fmt.Errorf("bench: balancer: %w", err)
		}
	}
	eps := make([]balancer.Endpoint, len(provs))
	urls := make([]string, len(provs))
	for i, p := range provs {
		eps[i] = balancer.Endpoint{ID: p.name, Addr: p.addr, Weight: uint32(p.threads)}
		urls[i] = "http://" + p.addr + "/"
	}
	picker := pol.Build(eps)
	if cfg.Proxy != nil {
		addrs := make([]string, len(provs))
		for i, p := range provs {
			addrs[i] = p.addr
		}
		url, stop, err := cfg.Proxy(ctx, name, addrs)
		if err != nil {
			return Result{}, fmt.Errorf("bench: balancer: proxy: %w", err)
		}
		defer stop()
		picker, urls = passThrough{}, []string{url}
	}

	nPhases := len(provs[0].phases)
	inFlight := max(1024/cfg.Scale, 1)
	measure := time.Duration(nPhases) * cfg.Phase
	total := cfg.Warmup + measure
	transport := &http.Transport{
		MaxIdleConns:        2 * inFlight,
		MaxIdleConnsPerHost: inFlight + 8,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	runCtx, cancel := context.WithTimeout(ctx, total+cfg.Timeout+5*time.Second)
	defer cancel()
	start := time.Now()
	mStart := start.Add(cfg.Warmup)
	mEnd := mStart.Add(measure)
	bins := make([]atomic.Int64, int(measure/binWidth)+1)

	// Phase boundaries switch provider capacities exactly on time.
	for ph := range nPhases {
		t := time.AfterFunc(time.Until(mStart.Add(time.Duration(ph)*cfg.Phase)), func() {
			for _, p := range provs {
				p.setPhase(ph)
			}
		})
		defer t.Stop()
	}
	bar := report.NewTimeBar(runCtx, cfg.Progress, name, total)
	var wg sync.WaitGroup
	stats := make([]*callStats, inFlight)
	for g := range inFlight {
		st := &callStats{perProvider: make([]int64, len(provs))}
		stats[g] = st
		wg.Add(1)
		go func() {
			defer wg.Done()
			clientLoop(runCtx, client, picker, urls, cfg.Timeout, mStart, mEnd, bins, st)
		}()
	}
	wg.Wait()
	cancel()
	bar.Finish()

	return summarize(name, cfg, provs, stats, bins, inFlight, measure), nil
}

// clientLoop is one closed-loop client: it keeps one call in flight until
// the end of the measured window. Every iteration is bounded by the call
// timeout; the loop by mEnd and ctx.
func clientLoop(ctx context.Context, client *http.Client, picker balancer.Picker, urls []string,
	timeout time.Duration, mStart, mEnd time.Time, bins []atomic.Int64, st *callStats) {
	for ctx.Err() == nil {
		idx, err := picker.Pick()
		if err != nil {
			now := time.Now()
			if !now.Before(mEnd) {
				return
			}
			if !now.Before(mStart) {
				st.sheds++
			}
			// A shed call failed fast; the caller retries a millisecond
			// later instead of spinning on Pick and starving the providers
			// of the CPU they share with it.
			time.Sleep(time.Millisecond)
			continue
		}
		t0 := time.Now()
		outcome := call(ctx, client, urls[idx], timeout)
		t1 := time.Now()
		lat := t1.Sub(t0)
		picker.Done(idx, lat, outcome)
		if !t1.Before(mEnd) {
			return
		}
		if t1.Before(mStart) {
			continue
		}
		switch outcome {
		case balancer.Success:
			st.successes++
			st.perProvider[idx]++
			st.latencies = append(st.latencies, lat)
			bins[int(t1.Sub(mStart)/binWidth)].Add(1)
		case balancer.Rejected:
			st.rejections++
		case balancer.Canceled: // the proxy shed it
			st.sheds++
			time.Sleep(time.Millisecond)
		case balancer.Timeout:
			st.timeouts++
		default:
			st.errors++
		}
	}
}

func call(ctx context.Context, client *http.Client, url string, timeout time.Duration) balancer.Outcome {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
	if err != nil {
		return balancer.Failed
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return balancer.Timeout
		}
		return balancer.Failed
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return balancer.Success
	case http.StatusServiceUnavailable:
		if resp.Header.Get("X-Sextant-Error") == "shed" {
			return balancer.Canceled // shed by a proxy in between
		}
		return balancer.Rejected
	}
	return balancer.Failed
}

func summarize(name string, cfg Config, provs []*simProvider, stats []*callStats,
	bins []atomic.Int64, inFlight int, measure time.Duration) Result {
	r := Result{
		Policy: name, Scale: cfg.Scale, InFlight: inFlight, Seconds: measure.Seconds(),
		PerProvider: make(map[string]int64, len(provs)),
	}
	var lats []time.Duration
	for _, st := range stats {
		r.Successes += st.successes
		r.Rejections += st.rejections
		r.Sheds += st.sheds
		r.Timeouts += st.timeouts
		r.Errors += st.errors
		if cfg.Proxy == nil {
			for i, n := range st.perProvider {
				r.PerProvider[provs[i].name] += n
			}
		}
		lats = append(lats, st.latencies...)
	}
	lat := report.Summarize(lats)
	r.P50Ms, r.P99Ms, r.P999Ms = lat.P50Ms, lat.P99Ms, lat.P999Ms

	nPhases := len(provs[0].phases)
	perBin := binWidth.Seconds()
	binsPerPhase := int(cfg.Phase / binWidth)
	for ph := range nPhases {
		rate := 0.0 // the phase's ceiling, calls per second
		for _, p := range provs {
			c := p.phases[ph]
			rate += float64(min(int64(c.MaxConcurrent), p.threads)) / meanServiceMs(c.AvgRTTMs) * 1000
		}
		r.Ceiling += rate * cfg.Phase.Seconds()
		r.RecoveryMs = append(r.RecoveryMs, recovery(bins, ph*binsPerPhase, binsPerPhase, 0.9*rate*perBin))
	}
	if r.Ceiling > 0 {
		r.Ratio = float64(r.Successes) / r.Ceiling
	}
	sorted := slices.Sorted(slices.Values(r.RecoveryMs))
	if len(sorted) > 0 {
		r.RecoveryMedianMs = sorted[len(sorted)/2]
		r.RecoveryMaxMs = sorted[len(sorted)-1]
	}
	return r
}

// recovery is how long after bin first the mean of three consecutive bins
// first reaches target per bin; the phase length if never.
func recovery(bins []atomic.Int64, first, n int, target float64) int64 {
	for k := 0; k+3 <= n && first+k+3 <= len(bins); k++ {
		sum := bins[first+k].Load() + bins[first+k+1].Load() + bins[first+k+2].Load()
		if float64(sum)/3 >= target {
			return int64(k) * binWidth.Milliseconds()
		}
	}
	return int64(n) * binWidth.Milliseconds()
}

// passThrough is the client's picker when a proxy balances: one target.
type passThrough struct{}

func (passThrough) Pick() (int, error)                        { return 0, nil }
func (passThrough) Done(int, time.Duration, balancer.Outcome) {}
