package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

// The sidecar scenario: the latency a pair of sidecars adds to a call
// (the client's sidecar, mutual TLS between them, the server's sidecar)
// over the direct call, at a fixed rate, for Sextant's pair (two `sextant
// sidecar` processes fed by a real `sextant server`: identities from its
// CA, DestinationRule ISTIO_MUTUAL, PeerAuthentication STRICT) and for
// nginx as the same pair of TLS proxies (two nginx processes of one worker
// each, mutual TLS verified on both ends); each sidecar's CPU per call and
// memory, idle and under the load.

// SidecarPairResult is one pair's figures, medians over the rounds.
type SidecarPairResult struct {
	Name     string  `json:"name"`
	P50Us    float64 `json:"p50_us"`
	P99Us    float64 `json:"p99_us"`
	AddedP50 float64 `json:"added_p50_us"` // over direct in the same round
	AddedP99 float64 `json:"added_p99_us"`
	Errors   int64   `json:"errors"`
	Sent     int64   `json:"sent"`
	// CPU per call of each side, user+system.
	ClientCPUUsPerReq float64 `json:"client_cpu_us_per_req"`
	ServerCPUUsPerReq float64 `json:"server_cpu_us_per_req"`
	// RSS of each side before the first run and halfway through a run,
	// and its anonymous part (heap and stacks: what is the process's own;
	// the rest is the binary's pages, shared by every sidecar of a host).
	ClientRSSIdle  int64 `json:"client_rss_idle_bytes"`
	ServerRSSIdle  int64 `json:"server_rss_idle_bytes"`
	ClientRSSLoad  int64 `json:"client_rss_load_bytes"`
	ServerRSSLoad  int64 `json:"server_rss_load_bytes"`
	ClientAnonIdle int64 `json:"client_anon_idle_bytes"`
	ServerAnonIdle int64 `json:"server_anon_idle_bytes"`
	ClientAnonLoad int64 `json:"client_anon_load_bytes"`
	ServerAnonLoad int64 `json:"server_anon_load_bytes"`
}

// anon is the anonymous memory of the process and its children
// (/proc/PID/smaps_rollup), in bytes.
func (p *process) anon() int64 {
	pid := p.cmd.Process.Pid
	total := procAnon(pid)
	for _, c := range children(pid) {
		total += procAnon(c)
	}
	return total
}

func procAnon(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Anonymous:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// SidecarResult is the scenario's one JSON object.
type SidecarResult struct {
	Scenario    string              `json:"scenario"`
	RatePS      float64             `json:"rate_per_s"`
	Connections int                 `json:"connections"`
	Seconds     float64             `json:"seconds"`
	Rounds      int                 `json:"rounds"`
	BodyBytes   int                 `json:"body_bytes"`
	DirectP50Us float64             `json:"direct_p50_us"`
	DirectP99Us float64             `json:"direct_p99_us"`
	Pairs       []SidecarPairResult `json:"pairs"`
	// Added latency of Sextant's pair over nginx's, each over direct.
	SextantVsNginxAddedP50 float64    `json:"sextant_vs_nginx_added_p50"`
	SextantVsNginxAddedP99 float64    `json:"sextant_vs_nginx_added_p99"`
	LoadAvg                [3]float64 `json:"loadavg"`
	Nproc                  int        `json:"nproc"`
}

// pair is a client-side and a server-side proxy; the loader calls the
// client side with host as Host.
type pair struct {
	name           string
	client, server *process
	host           string
}

// RunSidecar runs the sidecar scenario. cfg: Binary, Rounds, Connections
// (of the loader), Body, LatencyRate (default 1000/s), LatencyDuration.
func RunSidecar(ctx context.Context, cfg Config) (*SidecarResult, error) {
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if cfg.Connections <= 0 {
		cfg.Connections = 16
	}
	if cfg.Body <= 0 {
		cfg.Body = 1024
	}
	if cfg.LatencyRate <= 0 {
		cfg.LatencyRate = 1000
	}
	if cfg.LatencyDuration <= 0 {
		cfg.LatencyDuration = 5 * time.Second
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		return nil, errors.New("bench: nginx not found (apt-get install -y nginx)")
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	tmp, err := os.MkdirTemp("", "sextant-bench-sidecar-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var procs []*process
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()
	up, err := startProcess(ctx, "upstream", cfg.Binary, "bench", "gateway-serve", "--mode", "upstream",
		"--listen", "127.0.0.1:0", "--body", strconv.Itoa(cfg.Body))
	if err != nil {
		return nil, err
	}
	procs = append(procs, up)
	sx, err := startSextantPair(ctx, cfg.Binary, tmp, up.addr, &procs)
	if err != nil {
		return nil, err
	}
	ng, err := startNginxPair(ctx, tmp, up.addr, &procs)
	if err != nil {
		return nil, err
	}
	direct := &process{name: "direct", addr: up.addr, cmd: up.cmd, shared: true}
	pairs := []*pair{ng, sx}
	idle := map[string][4]int64{}
	for _, p := range pairs {
		idle[p.name] = [4]int64{p.client.rss(), p.server.rss(), p.client.anon(), p.server.anon()}
	}
	res := &SidecarResult{Scenario: "sidecar", RatePS: cfg.LatencyRate, Connections: cfg.Connections,
		Seconds: cfg.LatencyDuration.Seconds(), Rounds: cfg.Rounds, BodyBytes: cfg.Body, Nproc: nprocs()}
	rounds := map[string][]SidecarPairResult{}
	var directs []LatencyResult
	for r := range cfg.Rounds {
		d, err := fixedRate(ctx, direct.addr, "", cfg.LatencyRate, cfg.Connections, cfg.LatencyDuration)
		if err != nil {
			return nil, fmt.Errorf("bench: direct: %w", err)
		}
		directs = append(directs, d)
		progress("round %d direct        p50 %6.0f us  p99 %6.0f us", r+1, d.P50Us, d.P99Us)
		for _, p := range pairs {
			c0, s0 := p.client.cpu(), p.server.cpu()
			loadc := make(chan [4]int64, 1)
			half := time.AfterFunc(cfg.LatencyDuration/2, func() {
				loadc <- [4]int64{p.client.rss(), p.server.rss(), p.client.anon(), p.server.anon()}
			})
			lr, err := fixedRate(ctx, p.client.addr, p.host, cfg.LatencyRate, cfg.Connections, cfg.LatencyDuration)
			var load [4]int64
			if half.Stop() {
				close(loadc) // never sampled: the run ended early
			}
			load = <-loadc
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", p.name, err)
			}
			pr := SidecarPairResult{Name: p.name, P50Us: lr.P50Us, P99Us: lr.P99Us, AddedP50: round3(lr.P50Us - d.P50Us),
				AddedP99: round3(lr.P99Us - d.P99Us), Errors: lr.Errors, Sent: lr.Sent,
				ClientRSSIdle: idle[p.name][0], ServerRSSIdle: idle[p.name][1], ClientRSSLoad: load[0], ServerRSSLoad: load[1],
				ClientAnonIdle: idle[p.name][2], ServerAnonIdle: idle[p.name][3], ClientAnonLoad: load[2], ServerAnonLoad: load[3]}
			if ok := lr.Sent - lr.Errors; ok > 0 {
				pr.ClientCPUUsPerReq = round3((p.client.cpu() - c0).Seconds() * 1e6 / float64(ok))
				pr.ServerCPUUsPerReq = round3((p.server.cpu() - s0).Seconds() * 1e6 / float64(ok))
			}
			progress("round %d %-13s p50 %6.0f us  p99 %6.0f us  added p50 %6.0f us  p99 %6.0f us  CPU/call %.0f+%.0f us  errors %d",
				r+1, p.name, pr.P50Us, pr.P99Us, pr.AddedP50, pr.AddedP99, pr.ClientCPUUsPerReq, pr.ServerCPUUsPerReq, pr.Errors)
			rounds[p.name] = append(rounds[p.name], pr)
		}
	}
	slices.SortFunc(directs, func(a, b LatencyResult) int { return int(a.P50Us - b.P50Us) })
	res.DirectP50Us, res.DirectP99Us = directs[len(directs)/2].P50Us, directs[len(directs)/2].P99Us
	med := func(rs []SidecarPairResult, f func(SidecarPairResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for _, p := range pairs {
		rs := rounds[p.name]
		m := rs[len(rs)-1] // memory and counts of the last round
		m.P50Us = med(rs, func(r SidecarPairResult) float64 { return r.P50Us })
		m.P99Us = med(rs, func(r SidecarPairResult) float64 { return r.P99Us })
		m.AddedP50 = med(rs, func(r SidecarPairResult) float64 { return r.AddedP50 })
		m.AddedP99 = med(rs, func(r SidecarPairResult) float64 { return r.AddedP99 })
		m.ClientCPUUsPerReq = med(rs, func(r SidecarPairResult) float64 { return r.ClientCPUUsPerReq })
		m.ServerCPUUsPerReq = med(rs, func(r SidecarPairResult) float64 { return r.ServerCPUUsPerReq })
		m.Errors, m.Sent = 0, 0
		for _, r := range rs {
			m.Errors += r.Errors
			m.Sent += r.Sent
		}
		res.Pairs = append(res.Pairs, m)
	}
	// Ratios pair the two within each round, then take the median.
	ratio := func(f func(SidecarPairResult) float64) float64 {
		var v []float64
		for i := range rounds[sx.name] {
			if n := f(rounds[ng.name][i]); n > 0 {
				v = append(v, f(rounds[sx.name][i])/n)
			}
		}
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return round3(v[len(v)/2])
	}
	res.SextantVsNginxAddedP50 = ratio(func(r SidecarPairResult) float64 { return r.AddedP50 })
	res.SextantVsNginxAddedP99 = ratio(func(r SidecarPairResult) float64 { return r.AddedP99 })
	res.LoadAvg = report.LoadAvg()
	return res, nil
}

// sidecarBenchConfig is what the server gets: callers of orders in
// namespace bench originate the mesh's mutual TLS, and bench's servers take
// nothing else.
const sidecarBenchConfig = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: bench}
spec:
  host: orders
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: bench}
spec:
  mtls: {mode: STRICT}
`

// startSextantPair starts a server and two sidecars: orders in front of
// the upstream, web in front of nothing (the loader is its app).
func startSextantPair(ctx context.Context, bin, tmp, upstream string, procs *[]*process) (*pair, error) {
	addr := func() (string, error) {
		p, err := freePort()
		return "127.0.0.1:" + strconv.Itoa(p), err
	}
	var api, xds string
	var err error
	if api, err = addr(); err != nil {
		return nil, err
	}
	if xds, err = addr(); err != nil {
		return nil, err
	}
	srv, err := startKnown(ctx, "server", api, bin, "server", "--data", filepath.Join(tmp, "server"), "--http", api, "--xds", xds, "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	*procs = append(*procs, srv)
	apply := exec.CommandContext(ctx, bin, "config", "apply", "-f", "-", "--server", "http://"+api)
	apply.Stdin = strings.NewReader(sidecarBenchConfig)
	if out, err := apply.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bench: config apply: %v: %s", err, out)
	}
	_, upPort, _ := strings.Cut(upstream, ":")
	side := func(name, service, appPort string) (*process, error) {
		var mesh, out, admin string
		for _, a := range []*string{&mesh, &out, &admin} {
			if *a, err = addr(); err != nil {
				return nil, err
			}
		}
		p, err := startKnown(ctx, name, out, bin, "sidecar", "--service", service, "--app-port", appPort, "--label", "app="+name,
			"--mesh-listen", mesh, "--outbound", out, "--admin", admin, "--xds", xds, "--registry", "http://"+api,
			"--data", filepath.Join(tmp, name), "--log-level", "error") // the client side has no app: its warning is expected
		if err != nil {
			return nil, err
		}
		*procs = append(*procs, p)
		return p, nil
	}
	server, err := side("sextant-server", "bench/orders", upPort)
	if err != nil {
		return nil, err
	}
	client, err := side("sextant-client", "bench/web", "9")
	if err != nil {
		return nil, err
	}
	p := &pair{name: "sextant-pair", client: client, server: server, host: "orders.bench"}
	return p, waitPair(ctx, p)
}

// startNginxPair starts nginx as the client's and the server's side, with
// the bench's certificate on both ends.
func startNginxPair(ctx context.Context, tmp, upstream string, procs *[]*process) (*pair, error) {
	cert, err := newBenchCert(tmp)
	if err != nil {
		return nil, err
	}
	one := func(name, file, upstream string) (*process, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		t, err := template.ParseFS(configs, "configs/"+file+".tmpl")
		if err != nil {
			return nil, err
		}
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		listen := "127.0.0.1:" + strconv.Itoa(port)
		err = t.Execute(f, map[string]string{"Dir": dir, "Listen": listen, "Upstream": upstream, "Cert": cert.certFile, "Key": cert.keyFile})
		f.Close()
		if err != nil {
			return nil, err
		}
		p, err := startKnown(ctx, name, listen, "nginx", "-p", dir, "-c", filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		*procs = append(*procs, p)
		return p, nil
	}
	server, err := one("nginx-server", "nginx-mtls-server.conf", upstream)
	if err != nil {
		return nil, err
	}
	client, err := one("nginx-client", "nginx-mtls-client.conf", server.addr)
	if err != nil {
		return nil, err
	}
	p := &pair{name: "nginx-pair", client: client, server: server}
	return p, waitPair(ctx, p)
}

// waitPair waits until a call through the pair is answered 200 (the
// sidecars need their identities and config first).
func waitPair(ctx context.Context, p *pair) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+p.client.addr+"/", nil)
		if p.host != "" {
			req.Host = p.host
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bench: %s does not route: %w", p.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
