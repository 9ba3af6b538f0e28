package gateway

import (
	"bufio"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

//go:embed configs/*.tmpl
var configs embed.FS

// Config configures the throughput and latency scenario; zero values are
// the defaults of DESIGN.md's measurement (wrk -t2 -c64, 1 KB answers).
type Config struct {
	// Binary is the sextant executable started for the upstream, the
	// gateway and the candidates (os.Executable()).
	Binary string
	// Proxies to measure, in order: direct, nginx, haproxy, sextant,
	// sextant-norecord, and the candidates (reverseproxy,
	// nethttp-fastclient). Default: all. sextant-noistio (Istio's
	// metrics off) is measured only when named.
	Proxies []string
	// Duration of each wrk run (default 10s); Rounds of every proxy, the
	// median is reported (default 1).
	Duration time.Duration
	Rounds   int
	// Connections and Threads of wrk (64, 2); Body bytes per answer (1024).
	Connections, Threads, Body int
	// LatencyRate is the fixed rate of the added-latency runs (default:
	// half of nginx's measured requests/s); LatencyDuration their length
	// (default 5s). Zero LatencyDuration with a negative rate skips them.
	LatencyRate     float64
	LatencyDuration time.Duration
	// Progress receives one line per run (nil: none).
	Progress io.Writer
}

// AllProxies is the default list.
var AllProxies = []string{"direct", "nginx", "haproxy", "sextant", "sextant-norecord", "sextant-1cpu", "reverseproxy", "nethttp-fastclient", "fasthttp-bare", "go-floor"}

// TLSProxies are the proxies measured over HTTPS (wrk with TLS, keep-alive):
// nginx and the gateway with the same certificate, TLS 1.3 AES-128-GCM.
// Not in the default list; name them with --proxies.
var TLSProxies = []string{"nginx-tls", "sextant-tls"}

// isTLS reports whether proxy name is measured over HTTPS.
func isTLS(name string) bool { return slices.Contains(TLSProxies, name) }

// ProxyResult is one proxy's throughput run.
type ProxyResult struct {
	Name        string  `json:"name"`
	RequestsPS  float64 `json:"requests_per_s"`
	CPUUsPerReq float64 `json:"cpu_us_per_request"` // the proxy process's CPU (user+system) per request
	P50Ms       float64 `json:"wrk_p50_ms"`
	P99Ms       float64 `json:"wrk_p99_ms"`
	Errors      int64   `json:"errors"`
	RSSBytes    int64   `json:"rss_bytes,omitempty"`
}

// LatencyResult is one proxy at a fixed rate.
type LatencyResult struct {
	Name     string  `json:"name"`
	RatePS   float64 `json:"rate_per_s"`
	Sent     int64   `json:"sent"`
	Errors   int64   `json:"errors"`
	P50Us    float64 `json:"p50_us"`
	P99Us    float64 `json:"p99_us"`
	AddedP50 float64 `json:"added_p50_us"` // over direct at the same rate
	AddedP99 float64 `json:"added_p99_us"`
}

// Result is the scenario's one JSON object.
type Result struct {
	Scenario           string          `json:"scenario"`
	Connections        int             `json:"connections"`
	Threads            int             `json:"wrk_threads"`
	BodyBytes          int             `json:"body_bytes"`
	Seconds            float64         `json:"seconds_per_run"`
	Rounds             int             `json:"rounds"`
	Proxies            []ProxyResult   `json:"proxies"`
	Latency            []LatencyResult `json:"latency,omitempty"`
	SextantVsNginx     float64         `json:"sextant_vs_nginx_rps_ratio,omitempty"`
	Sextant1CPUVsNginx float64         `json:"sextant_1cpu_vs_nginx_rps_ratio,omitempty"`
	SextantVsHAProxy   float64         `json:"sextant_vs_haproxy_rps_ratio,omitempty"`
	// Over HTTPS: the gateway against nginx, and against itself in plaintext.
	SextantTLSVsNginxTLS float64    `json:"sextant_tls_vs_nginx_tls_rps_ratio,omitempty"`
	SextantTLSVsPlain    float64    `json:"sextant_tls_vs_sextant_plain_rps_ratio,omitempty"`
	RecordingCostFrac    float64    `json:"recording_rps_loss_fraction,omitempty"`
	LoadAvg              [3]float64 `json:"load_avg"`
	Nproc                int        `json:"nproc"`

	// IstioMetricsVsOff: sextant (Istio's metrics on, the default) over
	// sextant-noistio (--istio-metrics=false), paired per round.
	IstioMetricsVsOff float64 `json:"istio_metrics_vs_off_rps_ratio,omitempty"`
}

// Run measures every proxy in cfg.Proxies in front of one upstream process.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if cfg.Connections <= 0 {
		cfg.Connections = 64
	}
	if cfg.Threads <= 0 {
		cfg.Threads = 2
	}
	if cfg.Body <= 0 {
		cfg.Body = 1024
	}
	if cfg.LatencyDuration <= 0 {
		cfg.LatencyDuration = 5 * time.Second
	}
	if len(cfg.Proxies) == 0 {
		cfg.Proxies = AllProxies
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, errors.New("bench: wrk not found (apt-get install -y wrk nginx haproxy)")
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	tmp, err := os.MkdirTemp("", "sextant-bench-gateway-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	up, err := startProcess(ctx, "upstream", cfg.Binary, "bench", "gateway-serve", "--mode", "upstream",
		"--listen", "127.0.0.1:0", "--body", strconv.Itoa(cfg.Body))
	if err != nil {
		return nil, err
	}
	defer up.stop()
	cp, err := startControlPlane()
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	pc := proxyConfig{policy: "round_robin", endpoints: []string{up.addr}, timeout: 15 * time.Second}
	var tlsAddr string
	if slices.ContainsFunc(cfg.Proxies, isTLS) {
		if pc.cert, err = newBenchCert(tmp); err != nil {
			return nil, err
		}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		pc.tlsPort, tlsAddr = uint32(port), "127.0.0.1:"+strconv.Itoa(port)
	}
	if err := cp.set(pc); err != nil {
		return nil, err
	}

	res := &Result{Scenario: "throughput", Connections: cfg.Connections, Threads: cfg.Threads, BodyBytes: cfg.Body,
		Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds, Nproc: nprocs()}
	rounds := map[string][]ProxyResult{}
	procs := map[string]*process{}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for _, name := range cfg.Proxies {
		p, err := startProxy(ctx, name, cfg.Binary, up, cp, tmp, pc.cert, tlsAddr, false)
		if err != nil {
			return nil, fmt.Errorf("bench: start %s: %w", name, err)
		}
		procs[name] = p
	}
	for r := range cfg.Rounds {
		for _, name := range cfg.Proxies {
			p := procs[name]
			cpu0 := p.cpu()
			scheme := "http://"
			if isTLS(name) {
				scheme = "https://"
			}
			w, err := runWrk(ctx, scheme+p.addr+"/", cfg)
			if err != nil {
				return nil, fmt.Errorf("bench: wrk against %s: %w", name, err)
			}
			pr := ProxyResult{Name: name, RequestsPS: w.rps, P50Ms: w.p50, P99Ms: w.p99, Errors: w.errors, RSSBytes: p.rss()}
			if cpu := p.cpu() - cpu0; w.requests > 0 {
				pr.CPUUsPerReq = cpu.Seconds() * 1e6 / float64(w.requests)
			}
			progress("round %d %-20s %8.0f req/s  %6.1f us CPU/req  p99 %.2f ms", r+1, name, pr.RequestsPS, pr.CPUUsPerReq, pr.P99Ms)
			rounds[name] = append(rounds[name], pr)
		}
	}
	byName := map[string]ProxyResult{}
	for _, name := range cfg.Proxies {
		rs := slices.Clone(rounds[name])
		slices.SortFunc(rs, func(a, b ProxyResult) int { return cmp.Compare(a.RequestsPS, b.RequestsPS) })
		med := rs[len(rs)/2]
		byName[name] = med
		res.Proxies = append(res.Proxies, med)
	}
	// Ratios pair the proxies within each round (seconds apart), then take
	// the median over rounds: the machine's load moves between rounds.
	ratio := func(a, b string) float64 {
		ra, rb := rounds[a], rounds[b]
		if len(ra) == 0 || len(rb) == 0 {
			return 0
		}
		var rs []float64
		for i := range min(len(ra), len(rb)) {
			if rb[i].RequestsPS > 0 {
				rs = append(rs, ra[i].RequestsPS/rb[i].RequestsPS)
			}
		}
		if len(rs) == 0 {
			return 0
		}
		slices.Sort(rs)
		return round3(rs[len(rs)/2])
	}
	res.SextantVsNginx = ratio("sextant", "nginx")
	res.Sextant1CPUVsNginx = ratio("sextant-1cpu", "nginx")
	res.SextantVsHAProxy = ratio("sextant", "haproxy")
	res.SextantTLSVsNginxTLS = ratio("sextant-tls", "nginx-tls")
	res.SextantTLSVsPlain = ratio("sextant-tls", "sextant")
	res.IstioMetricsVsOff = ratio("sextant", "sextant-noistio")
	if r := ratio("sextant", "sextant-norecord"); r > 0 {
		res.RecordingCostFrac = round3(1 - r)
	}

	// Added latency at a fixed rate: half of nginx's peak.
	rate := cfg.LatencyRate
	if rate == 0 {
		rate = byName["nginx"].RequestsPS / 2
	}
	if rate > 0 {
		var direct *LatencyResult
		for _, name := range []string{"direct", "nginx", "haproxy", "sextant", "sextant-1cpu"} {
			p := procs[name]
			if p == nil {
				continue
			}
			lr, err := fixedRate(ctx, p.addr, "", rate, cfg.Connections, cfg.LatencyDuration)
			if err != nil {
				return nil, fmt.Errorf("bench: fixed rate against %s: %w", name, err)
			}
			lr.Name = name
			if name == "direct" {
				direct = &lr
			} else if direct != nil {
				lr.AddedP50 = round3(lr.P50Us - direct.P50Us)
				lr.AddedP99 = round3(lr.P99Us - direct.P99Us)
			}
			progress("latency %-12s at %.0f/s: p50 %.0f us  p99 %.0f us", name, rate, lr.P50Us, lr.P99Us)
			res.Latency = append(res.Latency, lr)
		}
	}
	res.LoadAvg = report.LoadAvg()
	return res, nil
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 } // half away from zero, negatives too (added latency)

// startProxy starts proxy name in front of up.
// stream configures nginx for the stream scenario (no body buffering).
func startProxy(ctx context.Context, name, bin string, up *process, cp *controlPlane, tmp string, cert *benchCert, tlsAddr string, stream bool) (*process, error) {
	switch name {
	case "direct":
		return &process{name: "direct", addr: up.addr, cmd: up.cmd, shared: true}, nil
	case "sextant-tls":
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		plain := "127.0.0.1:" + strconv.Itoa(port)
		aport, err := freePort()
		if err != nil {
			return nil, err
		}
		admin := "127.0.0.1:" + strconv.Itoa(aport)
		p, err := startKnown(ctx, name, tlsAddr, bin, "gateway", "--xds", cp.addr, "--listen", plain, "--tls-listen", tlsAddr,
			"--admin", admin, "--admin-pprof", "--data", filepath.Join(tmp, name), "--node-id", NodeID, "--log-level", "warn")
		if err != nil {
			return nil, err
		}
		p.admin = admin
		if err := waitRoutedTLS("https://" + tlsAddr + "/"); err != nil {
			p.stop()
			return nil, err
		}
		return p, nil
	case "nginx", "haproxy", "nginx-tls":
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		file := map[string]string{"nginx": "nginx.conf", "haproxy": "haproxy.cfg", "nginx-tls": "nginx-tls.conf"}[name]
		t, err := template.ParseFS(configs, "configs/"+file+".tmpl")
		if err != nil {
			return nil, err
		}
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		vars := map[string]string{"Dir": dir, "Listen": "127.0.0.1:" + strconv.Itoa(port), "Upstream": up.addr}
		if cert != nil {
			vars["Cert"], vars["Key"] = cert.certFile, cert.keyFile
		}
		if stream {
			vars["Stream"] = "on"
		}
		err = t.Execute(f, vars)
		f.Close()
		if err != nil {
			return nil, err
		}
		var args []string
		if name != "haproxy" {
			args = []string{"nginx", "-p", dir, "-c", filepath.Join(dir, file)}
		} else {
			args = []string{"haproxy", "-db", "-f", filepath.Join(dir, file)}
		}
		return startKnown(ctx, name, "127.0.0.1:"+strconv.Itoa(port), args...)
	case "sextant", "sextant-norecord", "sextant-1cpu", "sextant-noistio":
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		args := []string{bin, "gateway", "--xds", cp.addr, "--listen", addr, "--admin", "127.0.0.1:0",
			"--data", filepath.Join(tmp, name), "--node-id", NodeID, "--log-level", "warn"}
		if name == "sextant-norecord" {
			args = append(args, "--no-call-log")
		}
		if name == "sextant-noistio" {
			args = append(args, "--istio-metrics=false")
		}
		if name == "sextant-1cpu" {
			args = append(args, "--procs", "1") // one core, as nginx's one worker
		}
		p, err := startKnown(ctx, name, addr, args...)
		if err != nil {
			return nil, err
		}
		if err := waitRouted("http://" + addr + "/probe"); err != nil {
			p.stop()
			return nil, err
		}
		return p, nil
	default:
		if !slices.Contains(Candidates, name) {
			return nil, fmt.Errorf("unknown proxy %q (known: %v)", name, AllProxies)
		}
		return startProcess(ctx, name, bin, "bench", "gateway-serve", "--mode", name, "--listen", "127.0.0.1:0", "--upstream", up.addr)
	}
}

// process is a proxy or upstream started by the bench.
type process struct {
	name   string
	addr   string
	cmd    *exec.Cmd
	shared bool   // "direct" reuses the upstream's process: never stop it twice
	admin  string // the gateway's admin address, when the bench knows it (sextant-tls)
}

// startProcess runs a sextant hidden serve command, which prints its
// address as its first line of output. An empty bin runs args (a command
// wrapped in taskset).
func startProcess(ctx context.Context, name, bin string, args ...string) (*process, error) {
	if bin == "" {
		bin, args = args[0], args[1:]
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("bench: %s printed no address: %w", name, err)
	}
	return &process{name: name, addr: strings.TrimSpace(line), cmd: cmd}, nil
}

// startKnown runs a program listening on addr and waits until it accepts.
func startKnown(ctx context.Context, name, addr string, args ...string) (*process, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{name: name, addr: addr, cmd: cmd}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("bench: %s does not listen on %s", name, addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *process) stop() {
	if p.shared || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// cpu is the user+system CPU time of the process and its children (nginx's
// worker) so far.
func (p *process) cpu() time.Duration {
	pid := p.cmd.Process.Pid
	total := procCPU(pid)
	for _, c := range children(pid) {
		total += procCPU(c)
	}
	return total
}

func (p *process) rss() int64 {
	pid := p.cmd.Process.Pid
	total := procRSS(pid)
	for _, c := range children(pid) {
		total += procRSS(c)
	}
	return total
}

func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+2:]) // fields from 3 (state) on
}

const clkTck = 100 // USER_HZ on Linux

func procCPU(pid int) time.Duration {
	u, s := procUserSys(pid)
	return u + s
}

// procUserSys is the user and system CPU time of process pid.
func procUserSys(pid int) (user, sys time.Duration) {
	f := procStat(pid)
	if len(f) < 13 {
		return 0, 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // utime: field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // stime: field 15
	return time.Duration(ut) * time.Second / clkTck, time.Duration(st) * time.Second / clkTck
}

// userSys is cpu split into user and system time, with the process's
// voluntary and involuntary context switches (all its threads and
// children).
func (p *process) userSys() (user, sys time.Duration, ctxsw int64) {
	pid := p.cmd.Process.Pid
	for _, q := range append([]int{pid}, children(pid)...) {
		u, s := procUserSys(q)
		user, sys = user+u, sys+s
		ctxsw += ctxSwitches(q)
	}
	return user, sys, ctxsw
}

// ctxSwitches sums the context switches of every thread of pid.
func ctxSwitches(pid int) int64 {
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "voluntary_ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}

func procRSS(pid int) int64 {
	f := procStat(pid)
	if len(f) < 22 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[21], 10, 64) // rss: field 24
	return pages * int64(os.Getpagesize())
}

func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(c); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

type wrkResult struct {
	rps      float64
	requests int64
	errors   int64
	p50, p99 float64
}

// runWrk runs wrk and parses its summary.
func runWrk(ctx context.Context, url string, cfg Config) (wrkResult, error) {
	out, err := exec.CommandContext(ctx, "wrk", "-t"+strconv.Itoa(cfg.Threads), "-c"+strconv.Itoa(cfg.Connections),
		"-d"+strconv.Itoa(int(cfg.Duration.Seconds()))+"s", "--latency", url).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("%w: %s", err, out)
	}
	return parseWrk(string(out))
}

func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "Requests/sec:":
			r.rps, _ = strconv.ParseFloat(f[1], 64)
		case len(f) >= 2 && f[0] == "50%":
			r.p50 = wrkMs(f[1])
		case len(f) >= 2 && f[0] == "99%":
			r.p99 = wrkMs(f[1])
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			r.requests, _ = strconv.ParseInt(f[0], 10, 64)
		case len(f) >= 2 && f[0] == "Non-2xx":
			n, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
			r.errors += n
		case len(f) >= 2 && f[0] == "Socket" && f[1] == "errors:":
			for _, x := range f[2:] {
				n, _ := strconv.ParseInt(strings.TrimRight(x, ","), 10, 64)
				r.errors += n
			}
		}
	}
	if r.rps == 0 || r.requests == 0 {
		return r, fmt.Errorf("bench: cannot read wrk output: %s", out)
	}
	return r, nil
}

// wrkMs reads wrk's durations ("812.00us", "1.20ms", "2.01s") in ms.
func wrkMs(s string) float64 {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"us", 0.001}, {"ms", 1}, {"s", 1000}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			x, _ := strconv.ParseFloat(v, 64)
			return x * u.ms
		}
	}
	return 0
}
