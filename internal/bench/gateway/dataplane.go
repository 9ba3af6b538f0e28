package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// DataplaneScenarios are the dataplane scenario's figures (issue 48), in
// the order each round runs them.
var DataplaneScenarios = []string{"h1", "h1-tls", "h1-rate", "h1-tls-rate", "h2-tls", "h2c", "grpc-unary", "grpc-stream"}

// rateScenario reports whether s is a fixed-rate figure: latency at Rate
// requests/s rather than at saturation, with the loader straight to the
// upstream as "direct" so that each proxy's added latency shows.
func rateScenario(s string) bool { return s == "h1-rate" || s == "h1-tls-rate" }

// DataplaneProxies are the proxies each dataplane figure compares; the
// first is the one the ratios are of.
var DataplaneProxies = []string{"sextant", "nginx", "haproxy"}

// NginxLogProxy is nginx with an access log (a line a request, its
// upstream's address, status and time, buffered 64 KiB, flushed every
// second): the peer that records each call, as the gateway's call log.
// NginxFwdProxy is nginx editing each call's head as the gateway does
// (X-Forwarded-For, X-Forwarded-Proto, X-Request-Id, Via; Via and
// X-Request-Id on the answer), where nginx passes the head on as it came.
// NginxFwdLogProxy does both: per call, the work the gateway does with its
// call log on.
const (
	NginxLogProxy    = "nginx-log"
	NginxFwdProxy    = "nginx-fwd"
	NginxFwdLogProxy = "nginx-fwd-log"
)

// NginxPeers are the nginx configurations --proxies may name.
var NginxPeers = []string{"nginx", NginxLogProxy, NginxFwdProxy, NginxFwdLogProxy}

// DataplaneConfig configures the "dataplane" scenario: every proxy pinned
// to one core (ProxyCPU), the loaders and upstreams to another (LoadCPU),
// the proxies alternating within each round. Zero values are defaults.
type DataplaneConfig struct {
	Binary    string   // the sextant executable
	Scenarios []string // default DataplaneScenarios
	Proxies   []string // default DataplaneProxies
	Duration  time.Duration
	Rounds    int // default 3
	// Connections of wrk (64); H2Clients and H2Streams of h2load (8, 100);
	// GRPCConcurrency calls or streams in flight over one gRPC connection
	// (64).
	Connections, H2Clients, H2Streams, GRPCConcurrency int
	// Rate is the fixed-rate figures' requests/s (6400: about a third of
	// what one core proxies) over RateConnections (8: h2load's clients
	// tick together, so more connections send larger bursts and the
	// figure measures their queue).
	Rate, RateConnections int
	// ProxyCPU and LoadCPU are the cores (0 and 1); NoPin runs unpinned.
	ProxyCPU, LoadCPU int
	NoPin             bool
	// ProfileDir, if set, receives a CPU profile of the gateway during each
	// of its runs (<scenario>-round<n>.pprof).
	ProfileDir string
	// Variants are more gateways to measure beside the others (another
	// binary, or the same one with other environment variables: GOGC,
	// GOMAXPROCS), each named in Proxies by its Name.
	Variants []Variant
	Progress io.Writer

	// path and origin are the HTTP figures' request: "/" with no Origin,
	// or filtersPath from filtersOrigin when FiltersProxy runs.
	path, origin string
}

// Variant is a gateway started from Binary (default: the bench's own) with
// Env added to its environment and Args to its flags.
type Variant struct {
	Name, Binary string
	Env          []string
	Args         []string // flags added to "sextant gateway"
}

// DataplaneRun is one loader run against one proxy.
type DataplaneRun struct {
	Round        int     `json:"round"`
	Proxy        string  `json:"proxy"`
	RequestsPS   float64 `json:"requests_per_s"`
	CPUUsPerReq  float64 `json:"cpu_us_per_request"`  // the proxy's user+system CPU (with its children) per request
	UserUsPerReq float64 `json:"user_us_per_request"` // of which user
	// CtxSwPerReq is the proxy's context switches (voluntary and not, all
	// threads) per request.
	CtxSwPerReq float64 `json:"ctx_switches_per_request"`
	P50Ms       float64 `json:"p50_ms,omitempty"`
	P99Ms       float64 `json:"p99_ms,omitempty"`
	Errors      int64   `json:"errors"`
}

// DataplaneRatio is one figure of the first proxy over another's, paired
// per round (runs seconds apart), and the median of the rounds.
type DataplaneRatio struct {
	Of       string    `json:"of"`
	To       string    `json:"to"`
	Figure   string    `json:"figure"` // cpu_per_request, requests_per_s, p99
	PerRound []float64 `json:"per_round"`
	Median   float64   `json:"median"`
}

// DataplaneFigure is one scenario's runs and ratios.
type DataplaneFigure struct {
	Scenario string           `json:"scenario"`
	Loader   string           `json:"loader"`
	Runs     []DataplaneRun   `json:"runs"`
	Medians  []DataplaneRun   `json:"medians"` // per proxy, the median of each figure over rounds
	Ratios   []DataplaneRatio `json:"ratios"`
	// Direct (gRPC): the loader straight to the gRPC upstream, on the
	// proxy's core (its own); GatewayVsDirect is the gateway's calls/s
	// over it, paired per round. Fixed-rate figures: the loader straight
	// to the HTTP upstream from its usual core, and Added is each proxy's
	// latency over it.
	Direct          []DataplaneRun `json:"direct,omitempty"`
	GatewayVsDirect float64        `json:"gateway_vs_direct_rps,omitempty"`
	Added           []AddedLatency `json:"added_latency,omitempty"`
}

// AddedLatency is what a proxy adds to the direct call's p50 and p99 at a
// fixed rate: the median over rounds of each round's difference.
type AddedLatency struct {
	Proxy string  `json:"proxy"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// DataplaneResult is the scenario's one JSON object.
type DataplaneResult struct {
	Scenario string            `json:"scenario"`
	Seconds  float64           `json:"seconds_per_run"`
	Rounds   int               `json:"rounds"`
	Pinned   bool              `json:"pinned"`
	ProxyCPU int               `json:"proxy_cpu"`
	LoadCPU  int               `json:"load_cpu"`
	Figures  []DataplaneFigure `json:"figures"`
	LoadAvg  [][3]float64      `json:"load_avg_per_round"`
	Nproc    int               `json:"nproc"`
}

// dataplaneProxy is one proxy of the scenario: its process and the
// address of each of its ports.
type dataplaneProxy struct {
	*process
	h1, tls, h2c string
}

// serves reports whether the proxy has a port for scenario s.
func (p *dataplaneProxy) serves(s string) bool {
	switch s {
	case "h1", "h1-rate":
		return p.h1 != ""
	case "h1-tls", "h1-tls-rate", "h2-tls":
		return p.tls != ""
	}
	return p.h2c != ""
}

// RunDataplane runs the "dataplane" scenario: HTTP/1.1 keep-alive (wrk),
// HTTPS/1.1 (wrk), HTTP/2 over TLS and h2c (h2load), gRPC unary and
// bidirectional streaming (a grpc-go loader) through each proxy, the
// proxies alternating within each round.
func RunDataplane(ctx context.Context, cfg DataplaneConfig) (*DataplaneResult, error) {
	cfg = dataplaneDefaults(cfg)
	if slices.Contains(cfg.Proxies, FiltersProxy) {
		if err := checkFilterScenarios(cfg.Scenarios); err != nil {
			return nil, err
		}
		cfg.path, cfg.origin = filtersPath, filtersOrigin
	}
	for _, tool := range []string{"wrk", "h2load", "nginx", "haproxy"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("bench: %s not found (apt-get install -y wrk nghttp2-client nginx haproxy): %w", tool, err)
		}
	}
	if !cfg.NoPin {
		if n := nprocs(); n < 2 || cfg.ProxyCPU >= n || cfg.LoadCPU >= n {
			return nil, fmt.Errorf("bench: pinning needs cores %d and %d of %d (or --no-pin)", cfg.ProxyCPU, cfg.LoadCPU, n)
		}
		if _, err := exec.LookPath("taskset"); err != nil {
			return nil, fmt.Errorf("bench: taskset not found (util-linux), or run with --no-pin: %w", err)
		}
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	tmp, err := os.MkdirTemp("", "sextant-bench-dataplane-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	up, err := startProcess(ctx, "upstream", "", cfg.pin(cfg.LoadCPU, cfg.Binary, "bench", "gateway-serve",
		"--mode", "upstream", "--listen", "127.0.0.1:0", "--body", "1024")...)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	gup, err := startProcess(ctx, "grpc-upstream", "", cfg.pin(cfg.LoadCPU, cfg.Binary, "bench", "gateway-serve",
		"--mode", "grpc-upstream", "--listen", "127.0.0.1:0")...)
	if err != nil {
		return nil, err
	}
	defer gup.stop()
	cert, err := newBenchCert(tmp)
	if err != nil {
		return nil, err
	}
	cp, err := startControlPlane()
	if err != nil {
		return nil, err
	}
	defer cp.stop()

	proxies := map[string]*dataplaneProxy{}
	defer func() {
		for _, p := range proxies {
			p.stop()
		}
	}()
	for _, name := range cfg.Proxies {
		p, err := startDataplaneProxy(ctx, cfg, name, tmp, up.addr, gup.addr, cp, cert)
		if err != nil {
			return nil, fmt.Errorf("bench: start %s: %w", name, err)
		}
		proxies[name] = p
	}
	if cfg.origin != "" {
		if err := checkFilters(proxies, cfg.Proxies); err != nil {
			return nil, err
		}
		progress("filters checked: %s answers X-Served-By and Access-Control-Allow-Origin, the others neither", FiltersProxy)
	}

	res := &DataplaneResult{Scenario: "dataplane", Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds, Pinned: !cfg.NoPin,
		ProxyCPU: cfg.ProxyCPU, LoadCPU: cfg.LoadCPU, Nproc: nprocs()}
	figs := make([]DataplaneFigure, len(cfg.Scenarios))
	for i, s := range cfg.Scenarios {
		figs[i] = DataplaneFigure{Scenario: s, Loader: cfg.loaderName(s)}
	}
	for r := range cfg.Rounds {
		for i, s := range cfg.Scenarios {
			// The order rotates every round, so no proxy always runs
			// first (after a quiet spell) or right after another's load.
			order := slices.Clone(cfg.Proxies)
			for range (r + i) % len(order) {
				order = append(order[1:], order[0])
			}
			for _, name := range order {
				p := proxies[name]
				if !p.serves(s) {
					continue
				}
				stop := func() {}
				if p.admin != "" && cfg.ProfileDir != "" {
					stop = profile(ctx, TLSConfig{ProfileDir: cfg.ProfileDir, Duration: cfg.Duration}, p.process, fmt.Sprintf("%s-%s-round%d", s, name, r+1))
				}
				u0, s0, cs0 := p.userSys()
				w, err := cfg.load(ctx, s, p, cfg.LoadCPU)
				stop()
				if err != nil {
					return nil, fmt.Errorf("bench: %s through %s: %w", s, name, err)
				}
				run := DataplaneRun{Round: r + 1, Proxy: name, RequestsPS: w.rps, P50Ms: w.p50, P99Ms: w.p99, Errors: w.errors}
				if u1, s1, cs1 := p.userSys(); w.requests > 0 {
					n := float64(w.requests)
					run.CPUUsPerReq = round3((u1 + s1 - u0 - s0).Seconds() * 1e6 / n)
					run.UserUsPerReq = round3((u1 - u0).Seconds() * 1e6 / n)
					run.CtxSwPerReq = round3(float64(cs1-cs0) / n)
				}
				progress("round %d %-11s %-15s %9.0f req/s %7.1f us CPU/req (user %5.1f)  %5.3f ctxsw/req  p50 %6.2f ms  p99 %6.2f ms  errors %d",
					r+1, s, name, run.RequestsPS, run.CPUUsPerReq, run.UserUsPerReq, run.CtxSwPerReq, run.P50Ms, run.P99Ms, run.Errors)
				figs[i].Runs = append(figs[i].Runs, run)
			}
			if rateScenario(s) {
				// Direct: the same loader, from its core, to the upstream.
				w, err := cfg.load(ctx, "h1-rate", &dataplaneProxy{h1: up.addr}, cfg.LoadCPU)
				if err != nil {
					return nil, fmt.Errorf("bench: %s direct: %w", s, err)
				}
				run := DataplaneRun{Round: r + 1, Proxy: "direct", RequestsPS: w.rps, P50Ms: w.p50, P99Ms: w.p99, Errors: w.errors}
				progress("round %d %-11s %-15s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms", r+1, s, "direct", run.RequestsPS, run.P50Ms, run.P99Ms)
				figs[i].Direct = append(figs[i].Direct, run)
			}
			if s == "grpc-unary" || s == "grpc-stream" {
				// Direct: the loader on the proxies' core, alone there.
				w, err := cfg.load(ctx, s, &dataplaneProxy{h2c: gup.addr}, cfg.ProxyCPU)
				if err != nil {
					return nil, fmt.Errorf("bench: %s direct: %w", s, err)
				}
				run := DataplaneRun{Round: r + 1, Proxy: "direct", RequestsPS: w.rps, P50Ms: w.p50, P99Ms: w.p99, Errors: w.errors}
				progress("round %d %-11s %-15s %9.0f req/s  p99 %6.2f ms", r+1, s, "direct", run.RequestsPS, run.P99Ms)
				figs[i].Direct = append(figs[i].Direct, run)
			}
		}
		res.LoadAvg = append(res.LoadAvg, report.LoadAvg())
	}
	for i := range figs {
		figs[i].summarize(cfg.Proxies)
	}
	res.Figures = figs
	return res, nil
}

func dataplaneDefaults(cfg DataplaneConfig) DataplaneConfig {
	if len(cfg.Scenarios) == 0 {
		cfg.Scenarios = DataplaneScenarios
	}
	if len(cfg.Proxies) == 0 {
		cfg.Proxies = DataplaneProxies
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	cfg.Rounds = max(cfg.Rounds, 1)
	cfg.path = "/"
	if cfg.Connections <= 0 {
		cfg.Connections = 64
	}
	if cfg.H2Clients <= 0 {
		cfg.H2Clients = 8
	}
	if cfg.H2Streams <= 0 {
		cfg.H2Streams = 100
	}
	if cfg.GRPCConcurrency <= 0 {
		cfg.GRPCConcurrency = 64
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 6400
	}
	if cfg.RateConnections <= 0 {
		cfg.RateConnections = 8
	}
	if cfg.ProxyCPU == cfg.LoadCPU {
		cfg.ProxyCPU, cfg.LoadCPU = 0, 1
	}
	return cfg
}

// pin prefixes a command with taskset to run it on cpu (all its threads
// and children inherit the mask).
func (cfg DataplaneConfig) pin(cpu int, args ...string) []string {
	if cfg.NoPin {
		return args
	}
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, args...)
}

func (cfg DataplaneConfig) loaderName(s string) string {
	req := ""
	if cfg.origin != "" {
		req = fmt.Sprintf(", GET %s with Origin: %s", cfg.path, cfg.origin)
	}
	switch s {
	case "h1", "h1-tls":
		return fmt.Sprintf("wrk -t1 -c%d, 1 KiB answers, keep-alive%s", cfg.Connections, req)
	case "h1-rate", "h1-tls-rate":
		return fmt.Sprintf("h2load --h1 -t1 -c%d --rps %d (%d requests/s), 1 KiB answers, keep-alive%s", cfg.RateConnections, cfg.perClient(), cfg.perClient()*cfg.RateConnections, req)
	case "h2-tls", "h2c":
		return fmt.Sprintf("h2load -t1 -c%d -m%d, 1 KiB answers%s", cfg.H2Clients, cfg.H2Streams, req)
	case "grpc-unary":
		return fmt.Sprintf("grpc-go, one connection, %d unary calls in flight, 1 KiB answers", cfg.GRPCConcurrency)
	}
	return fmt.Sprintf("grpc-go, one connection, %d bidirectional streams, ping-pong of 1 KiB answers", cfg.GRPCConcurrency)
}

// load runs scenario s's loader against p on cpu.
func (cfg DataplaneConfig) load(ctx context.Context, s string, p *dataplaneProxy, cpu int) (wrkResult, error) {
	secs := strconv.Itoa(max(int(cfg.Duration.Seconds()), 1))
	var args, header []string
	if cfg.origin != "" {
		header = []string{"-H", "Origin: " + cfg.origin}
	}
	switch s {
	case "h1", "h1-tls":
		u := "http://" + p.h1 + cfg.path
		if s == "h1-tls" {
			u = "https://" + p.tls + cfg.path
		}
		args = cfg.pin(cpu, append(append([]string{"wrk", "-t1", "-c" + strconv.Itoa(cfg.Connections), "-d" + secs + "s", "--latency"}, header...), u)...)
	case "h2-tls", "h2c":
		u := "http://" + p.h2c + cfg.path
		if s == "h2-tls" {
			u = "https://" + p.tls + cfg.path
		}
		args = cfg.pin(cpu, append(append([]string{"h2load", "-t1", "-c", strconv.Itoa(cfg.H2Clients), "-m", strconv.Itoa(cfg.H2Streams), "-D", secs}, header...), u)...)
	case "h1-rate", "h1-tls-rate":
		u := "http://" + p.h1 + cfg.path
		if s == "h1-tls-rate" {
			u = "https://" + p.tls + cfg.path
		}
		return cfg.loadRate(ctx, u, header, cpu)
	case "grpc-unary", "grpc-stream":
		mode := map[string]string{"grpc-unary": "unary", "grpc-stream": "stream"}[s]
		args = cfg.pin(cpu, cfg.Binary, "bench", "gateway-grpc-load", "--target", p.h2c, "--mode", mode,
			"--concurrency", strconv.Itoa(cfg.GRPCConcurrency), "--duration", cfg.Duration.String())
	default:
		return wrkResult{}, fmt.Errorf("unknown dataplane scenario %q (known: %v)", s, DataplaneScenarios)
	}
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("%w: %s", err, out)
	}
	switch s {
	case "h1", "h1-tls":
		return parseWrk(string(out))
	case "h2-tls", "h2c":
		return parseH2load(string(out))
	}
	var g GRPCLoadResult
	if err := json.Unmarshal(lastLine(out), &g); err != nil {
		return wrkResult{}, fmt.Errorf("bench: grpc loader output: %w: %s", err, out)
	}
	if g.Calls == 0 {
		return wrkResult{}, fmt.Errorf("bench: no gRPC call answered: %s", out)
	}
	return wrkResult{rps: g.CallsPS, requests: g.Calls, errors: g.Errors, p50: g.P50Us / 1000, p99: g.P99Us / 1000}, nil
}

func lastLine(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return b[i+1:]
		}
	}
	return b
}

// summarize fills the medians and ratios from the runs.
func (f *DataplaneFigure) summarize(proxies []string) {
	byProxy := map[string][]DataplaneRun{}
	for _, r := range f.Runs {
		byProxy[r.Proxy] = append(byProxy[r.Proxy], r)
	}
	med := func(rs []DataplaneRun, get func(DataplaneRun) float64) float64 {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, get(r))
		}
		return median(xs)
	}
	medRun := func(name string, rs []DataplaneRun) DataplaneRun {
		return DataplaneRun{Proxy: name, RequestsPS: med(rs, func(r DataplaneRun) float64 { return r.RequestsPS }),
			CPUUsPerReq:  med(rs, func(r DataplaneRun) float64 { return r.CPUUsPerReq }),
			UserUsPerReq: med(rs, func(r DataplaneRun) float64 { return r.UserUsPerReq }),
			CtxSwPerReq:  med(rs, func(r DataplaneRun) float64 { return r.CtxSwPerReq }),
			P50Ms:        med(rs, func(r DataplaneRun) float64 { return r.P50Ms }),
			P99Ms:        med(rs, func(r DataplaneRun) float64 { return r.P99Ms }),
			Errors:       int64(med(rs, func(r DataplaneRun) float64 { return float64(r.Errors) }))}
	}
	for _, name := range proxies {
		if rs := byProxy[name]; len(rs) > 0 {
			f.Medians = append(f.Medians, medRun(name, rs))
		}
	}
	if len(f.Direct) > 0 {
		f.Medians = append(f.Medians, medRun("direct", f.Direct))
	}
	of := proxies[0]
	ratio := func(to, figure string, a, b []DataplaneRun, get func(DataplaneRun) float64) {
		r := DataplaneRatio{Of: of, To: to, Figure: figure}
		for i := range min(len(a), len(b)) {
			if d := get(b[i]); d > 0 && get(a[i]) > 0 {
				r.PerRound = append(r.PerRound, round3(get(a[i])/d))
			}
		}
		if len(r.PerRound) > 0 {
			r.Median = median(r.PerRound)
			f.Ratios = append(f.Ratios, r)
		}
	}
	for _, to := range proxies[1:] {
		a, b := byProxy[of], byProxy[to]
		ratio(to, "cpu_per_request", a, b, func(r DataplaneRun) float64 { return r.CPUUsPerReq })
		ratio(to, "user_cpu_per_request", a, b, func(r DataplaneRun) float64 { return r.UserUsPerReq })
		ratio(to, "requests_per_s", a, b, func(r DataplaneRun) float64 { return r.RequestsPS })
		ratio(to, "p99", a, b, func(r DataplaneRun) float64 { return r.P99Ms })
	}
	switch {
	case len(f.Direct) > 0 && rateScenario(f.Scenario):
		for _, name := range proxies {
			var p50, p99 []float64
			for i, r := range byProxy[name] {
				if i < len(f.Direct) {
					p50 = append(p50, r.P50Ms-f.Direct[i].P50Ms)
					p99 = append(p99, r.P99Ms-f.Direct[i].P99Ms)
				}
			}
			if len(p50) > 0 {
				f.Added = append(f.Added, AddedLatency{Proxy: name, P50Ms: median(p50), P99Ms: median(p99)})
			}
		}
	case len(f.Direct) > 0:
		ratio("direct", "requests_per_s", byProxy[of], f.Direct, func(r DataplaneRun) float64 { return r.RequestsPS })
		if n := len(f.Ratios); n > 0 && f.Ratios[n-1].To == "direct" {
			f.GatewayVsDirect = f.Ratios[n-1].Median
		}
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return round3(xs[len(xs)/2])
	}
	return round3((xs[len(xs)/2-1] + xs[len(xs)/2]) / 2)
}

// startDataplaneProxy starts proxy name on the proxies' core, with its
// HTTP/1.1, TLS and h2c ports (the gateway serves HTTP/1.1 and h2c on one).
func startDataplaneProxy(ctx context.Context, cfg DataplaneConfig, name, tmp, up, grpcUp string, cp *controlPlane, cert *benchCert) (*dataplaneProxy, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	dir := filepath.Join(tmp, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	v, variant := Variant{Name: "sextant"}, false
	for _, x := range cfg.Variants {
		if x.Name == name {
			v, variant = x, true
		}
	}
	switch {
	case name == "sextant" || name == FiltersProxy || variant:
		bin := cmp.Or(v.Binary, cfg.Binary)
		node := NodeID + "-" + name
		routes := routesOne
		if cfg.origin != "" {
			// Issue 43's figure: every gateway of the run serves the same
			// 10 routes, with the filters only in FiltersProxy.
			routes = routesPlain
			if name == FiltersProxy {
				routes = routesFilters
			}
		}
		if err := cp.set(proxyConfig{policy: "round_robin", endpoints: []string{up}, timeout: 15 * time.Second,
			tlsPort: uint32(ports[1]), cert: cert, grpcEndpoints: []string{grpcUp}, node: node, routes: routes}); err != nil {
			return nil, err
		}
		admin, err := freePort()
		if err != nil {
			return nil, err
		}
		args := append(append([]string{"env"}, v.Env...), bin, "gateway", "--xds", cp.addr, "--listen", addr(0),
			"--tls-listen", addr(1), "--admin", "127.0.0.1:"+strconv.Itoa(admin), "--admin-pprof", "--data", dir, "--node-id", node, "--log-level", "warn")
		args = append(args, v.Args...)
		p, err := startKnown(ctx, name, addr(0), cfg.pin(cfg.ProxyCPU, args...)...)
		if err != nil {
			return nil, err
		}
		p.admin = "127.0.0.1:" + strconv.Itoa(admin)
		dp := &dataplaneProxy{process: p, h1: addr(0), tls: addr(1), h2c: addr(0)}
		probe := "/probe"
		if routes != routesOne {
			probe = cfg.path // the 10 routes have none for /probe
		}
		if err := waitRouted("http://" + dp.h1 + probe); err != nil {
			p.stop()
			return nil, err
		}
		if err := waitRoutedTLS("https://" + dp.tls + probe); err != nil {
			p.stop()
			return nil, err
		}
		return dp, nil
	case slices.Contains(NginxPeers, name) || name == "haproxy":
		file := "nginx-dataplane.conf"
		if name == "haproxy" {
			file = "haproxy-dataplane.cfg"
		}
		t, err := template.ParseFS(configs, "configs/"+file+".tmpl")
		if err != nil {
			return nil, err
		}
		pem := filepath.Join(dir, "bench.pem") // HAProxy reads the certificate and key from one file
		if err := os.WriteFile(pem, append(append([]byte(nil), cert.certPEM...), cert.keyPEM...), 0o600); err != nil {
			return nil, err
		}
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		err = t.Execute(f, map[string]any{"Dir": dir, "Listen": addr(0), "TLSListen": addr(1), "H2CListen": addr(2),
			"Upstream": up, "GRPC": grpcUp, "Cert": cert.certFile, "Key": cert.keyFile, "PEM": pem, "AccessLog": name == NginxLogProxy || name == NginxFwdLogProxy, "Forward": name == NginxFwdProxy || name == NginxFwdLogProxy})
		f.Close()
		if err != nil {
			return nil, err
		}
		args := []string{"nginx", "-p", dir, "-c", filepath.Join(dir, file)}
		if name == "haproxy" {
			args = []string{"haproxy", "-db", "-f", filepath.Join(dir, file)}
		}
		p, err := startKnown(ctx, name, addr(0), cfg.pin(cfg.ProxyCPU, args...)...)
		if err != nil {
			return nil, err
		}
		return &dataplaneProxy{process: p, h1: addr(0), tls: addr(1), h2c: addr(2)}, nil
	case slices.Contains(Candidates, name):
		// A plain HTTP/1.1 data path: the h1 figure only.
		args := cfg.pin(cfg.ProxyCPU, cfg.Binary, "bench", "gateway-serve", "--mode", name, "--listen", addr(0), "--upstream", up)
		p, err := startKnown(ctx, name, addr(0), args...)
		if err != nil {
			return nil, err
		}
		return &dataplaneProxy{process: p, h1: addr(0)}, nil
	}
	return nil, errors.New("unknown proxy " + strconv.Quote(name) + " (known: sextant, " + FiltersProxy + ", " + strings.Join(NginxPeers, ", ") + ", haproxy, " + strings.Join(Candidates, ", ") + ")")
}
