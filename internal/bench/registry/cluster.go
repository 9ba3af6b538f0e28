package registry

// The cluster load generator: several "sextant server"s over one MySQL or
// MariaDB database (docs/cluster.md). It spreads single-instance registers
// over every server, times a write through one server until a blocking
// query on another wakes, and times a new server joining a registry of many
// instances until it is ready. It shares the registry load generator's
// HTTP caller and id families.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// ClusterScenarios lists the cluster scenarios in the order they run.
var ClusterScenarios = []string{"register", "crosswatch", "join"}

// ClusterConfig configures RunCluster. Zero values take the defaults in
// brackets.
type ClusterConfig struct {
	Servers   []string // URLs of the cluster's servers, at least 2
	Scenarios []string // subset of ClusterScenarios [all]
	Namespace string   // [bench-cluster-<unix time>]

	Duration      time.Duration // register: length [10s]
	Conns         int           // register: connections, spread over the servers [256]
	WatchRounds   int           // crosswatch: rounds [300]
	JoinInstances int           // join: instances the registry holds when the new server starts [200,000]
	// Join starts one more server on the same database and returns its
	// URL; the figure is the time until its /readyz answers 200. stop ends
	// it. Nil: no join scenario.
	Join func(ctx context.Context) (url string, stop func(), err error)

	Keep     bool
	Progress io.Writer
}

// ClusterResult is the JSON object RunCluster prints.
type ClusterResult struct {
	Servers   []string `json:"servers"`
	Namespace string   `json:"namespace"`
	Machine   struct {
		NumCPU int    `json:"num_cpu"`
		Note   string `json:"note"`
	} `json:"machine"`
	Register    *Throughput  `json:"register,omitempty"`
	RegisterCPU *ClusterCPU  `json:"register_cpu,omitempty"`
	CrossWatch  *Latency     `json:"crosswatch,omitempty"`
	Join        *ClusterJoin `json:"join,omitempty"`
	Cleanup     *Cleanup     `json:"cleanup,omitempty"`
}

// ClusterCPU is where the CPU of a cluster scenario went: the servers
// (from their /metrics), the database (from /proc, when it runs on this
// machine) and the load generator, and their sum per item, which bounds
// the rate the machine's cores could sustain for this run alone.
type ClusterCPU struct {
	ServerCPUSeconds   float64 `json:"servers_cpu_seconds"`
	DatabaseCPUSeconds float64 `json:"database_cpu_seconds,omitempty"`
	LoaderCPUSeconds   float64 `json:"loader_cpu_seconds"`
	CPUMicrosPerItem   float64 `json:"cpu_us_per_item"`
	// ProjectedPerSecond is NumCPU / CPUMicrosPerItem: the rate if the
	// run had every core to itself (other engineers' work excluded).
	ProjectedPerSecond float64 `json:"projected_per_second_on_all_cores"`
}

// ClusterJoin is the join figure.
type ClusterJoin struct {
	Instances     int     `json:"instances"`
	PreloadSecond float64 `json:"preload_seconds"`
	ReadySeconds  float64 `json:"ready_seconds"`
	ServedCount   int     `json:"served_instances"`
	TargetSeconds float64 `json:"target_seconds"`
}

// RunCluster runs the scenarios against cfg.Servers, writes one JSON
// object of figures to out and deregisters what it created unless Keep.
func RunCluster(ctx context.Context, cfg ClusterConfig, out io.Writer) (ClusterResult, error) {
	if len(cfg.Servers) < 2 {
		return ClusterResult{}, errors.New("bench: a cluster run needs at least 2 servers")
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Conns <= 0 {
		cfg.Conns = 256
	}
	if cfg.WatchRounds <= 0 {
		cfg.WatchRounds = 300
	}
	if cfg.JoinInstances <= 0 {
		cfg.JoinInstances = 200_000
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "bench-cluster-" + strconv.FormatInt(time.Now().Unix(), 10)
	}
	if len(cfg.Scenarios) == 0 {
		cfg.Scenarios = ClusterScenarios
	}
	runs := make([]*run, len(cfg.Servers))
	for i, s := range cfg.Servers {
		r, err := newPlainRun(s, Config{Server: s, Namespace: cfg.Namespace, Duration: cfg.Duration, Progress: cfg.Progress, BatchConns: 4})
		if err != nil {
			return ClusterResult{}, err
		}
		if _, err := r.c.Namespaces(ctx); err != nil {
			return ClusterResult{}, fmt.Errorf("bench: server %s not answering: %w", s, err)
		}
		runs[i] = r
	}
	res := ClusterResult{Servers: cfg.Servers, Namespace: cfg.Namespace}
	res.Machine.NumCPU = runtime.NumCPU()
	res.Machine.Note = "every server, the database and the load generator share this machine's cores; loopback HTTP/1.1"
	var runErr error
	for _, s := range cfg.Scenarios {
		var err error
		switch s {
		case "register":
			res.Register, res.RegisterCPU, err = clusterRegister(ctx, cfg, runs)
		case "crosswatch":
			res.CrossWatch, err = clusterWatch(ctx, cfg, runs)
		case "join":
			if cfg.Join != nil {
				res.Join, err = clusterJoin(ctx, cfg, runs)
			}
		default:
			err = fmt.Errorf("unknown scenario (have %v)", ClusterScenarios)
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			runErr = fmt.Errorf("bench: cluster %s: %w", s, err)
			break
		}
	}
	if cfg.Keep {
		res.Cleanup = &Cleanup{Kept: true}
	} else {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		all := &run{cfg: runs[0].cfg, c: runs[0].c, addr: runs[0].addr, host: runs[0].host}
		for _, r := range runs {
			all.created = append(all.created, r.created...)
		}
		var err error
		res.Cleanup, err = all.cleanup(cctx)
		cancel()
		if err != nil && runErr == nil {
			runErr = fmt.Errorf("bench: cluster cleanup: %w", err)
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil && runErr == nil {
		runErr = err
	}
	return res, runErr
}

// newPlainRun is a registry run against one plain-HTTP server.
func newPlainRun(server string, cfg Config) (*run, error) {
	c, err := client.New(server, client.WithUserAgent("sextant-bench/1"))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	u, err := url.Parse(c.BaseURL())
	if err != nil || u.Scheme != "http" || u.Port() == "" {
		return nil, fmt.Errorf("bench: server %q: want http://host:port", server)
	}
	return &run{cfg: cfg, c: c, addr: u.Host, host: u.Host, base: u.Path}, nil
}

// clusterRegister: single-instance registers from Conns connections, each
// bound to one server in turn, for Duration.
func clusterRegister(ctx context.Context, cfg ClusterConfig, runs []*run) (*Throughput, *ClusterCPU, error) {
	conns := cfg.Conns
	type gstate struct {
		fam  *family
		tmpl template
		c    *caller
		loaderStats
	}
	gs := make([]gstate, conns)
	for g := range gs {
		r := runs[g%len(runs)]
		prefix := "creg-g" + strconv.Itoa(g) + "-"
		gs[g] = gstate{fam: r.family(prefix), tmpl: newTemplate(cfg.Namespace, "creg-"+strconv.Itoa(g%64), prefix, 1, 0), c: r.caller()}
	}
	bar := report.NewTimeBar(ctx, runs[0].cfg.Progress, "register", cfg.Duration)
	stop := bar.Finish
	cpu := clusterCPU(ctx, runs)
	loader0 := report.ProcessCPU()
	db0, dbOK := databaseCPU()
	start := time.Now()
	end := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &gs[g]
			defer st.c.close()
			for t0 := time.Now(); ctx.Err() == nil && t0.Before(end); t0 = time.Now() {
				st.tmpl.set(uint64(st.fam.n.Add(1) - 1))
				if _, err := st.c.send(ctx, http.MethodPost, "/v1/instances", st.tmpl.body); err != nil {
					st.errors++
					if st.firstErr == nil {
						st.firstErr = err
					}
					if st.errors > 100 {
						return
					}
					continue
				}
				st.lat = append(st.lat, time.Since(t0))
				st.requests++
				st.items++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stop()
	res := &Throughput{Unit: "instances", Conns: conns, PerRequest: 1, Seconds: report.Round3(elapsed.Seconds()), Target: 10_000}
	var all []time.Duration
	for i := range gs {
		all = res.add(all, &gs[i].loaderStats)
	}
	res.summarize(all, elapsed)
	res.LoaderCPUSeconds = report.Round3(report.ProcessCPU() - loader0)
	cc := &ClusterCPU{LoaderCPUSeconds: res.LoaderCPUSeconds}
	if db1, ok := databaseCPU(); ok && dbOK {
		cc.DatabaseCPUSeconds = report.Round3(db1 - db0)
	}
	if s, ok := cpu(ctx); ok {
		res.ServerCPUSeconds = &s
		cc.ServerCPUSeconds = s
	}
	if total := cc.ServerCPUSeconds + cc.DatabaseCPUSeconds + cc.LoaderCPUSeconds; res.Items > 0 && total > 0 {
		cc.CPUMicrosPerItem = report.Round3(total / float64(res.Items) * 1e6)
		cc.ProjectedPerSecond = report.Round3(float64(runtime.NumCPU()) / (total / float64(res.Items)))
	}
	res.Note = fmt.Sprintf("connections spread round-robin over %d servers; server_cpu_seconds sums them", len(runs))
	if res.Requests == 0 {
		return res, cc, fmt.Errorf("no request succeeded: %s", res.FirstError)
	}
	return res, cc, nil
}

// databaseCPU is the CPU seconds of the MariaDB or MySQL server process on
// this machine, if there is one.
func databaseCPU() (float64, bool) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + d.Name() + "/comm")
		if err != nil {
			continue
		}
		if name := strings.TrimSpace(string(comm)); name != "mariadbd" && name != "mysqld" {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			return 0, false
		}
		// Fields after the command's closing parenthesis: utime is the
		// 12th, stime the 13th, in clock ticks (100 per second on Linux).
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 13 {
			return 0, false
		}
		u, err1 := strconv.ParseFloat(f[11], 64)
		s, err2 := strconv.ParseFloat(f[12], 64)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		return (u + s) / 100, true
	}
	return 0, false
}

// clusterCPU returns a func reporting the servers' CPU seconds since now.
func clusterCPU(ctx context.Context, runs []*run) func(context.Context) (float64, bool) {
	sum := func(ctx context.Context) (float64, bool) {
		t := 0.0
		for _, r := range runs {
			s, ok := r.serverCPU(ctx)
			if !ok {
				return 0, false
			}
			t += s
		}
		return t, true
	}
	start, ok := sum(ctx)
	return func(ctx context.Context) (float64, bool) {
		end, ok2 := sum(ctx)
		return report.Round3(end - start), ok && ok2
	}
}

// clusterWatch: a blocking query parks on one server; a register through
// another changes its service; the figure is from the register's answer
// (and from its sending) to the blocking query's answer. Rounds rotate the
// pair of servers.
func clusterWatch(ctx context.Context, cfg ClusterConfig, runs []*run) (*Latency, error) {
	const prefix = "cwatch-"
	r0 := runs[0]
	t := newTemplate(cfg.Namespace, "cwatch", prefix, 1, 0)
	f := r0.family(prefix)
	f.n.Store(1)
	round := indexOf(t.body, `"meta-key16":"v16-`)
	if round < 0 {
		return nil, errors.New("watch template lacks meta-key16")
	}
	t.set(0)
	regs := make([]*caller, len(runs))
	watchers := make([]*caller, len(runs))
	for i, r := range runs {
		regs[i], watchers[i] = r.caller(), r.caller()
		defer regs[i].close()
		defer watchers[i].close()
	}
	if _, err := regs[0].send(ctx, http.MethodPost, "/v1/instances", t.body); err != nil {
		return nil, err
	}
	qpath := "/v1/namespaces/" + cfg.Namespace + "/services/cwatch/instances"
	// Every server must have the first version before the rounds start.
	var index uint64
	for _, w := range watchers {
		for {
			if _, err := w.send(ctx, http.MethodGet, qpath, nil); err != nil {
				return nil, err
			}
			var a struct {
				Revision uint64 `json:"revision"`
			}
			if err := json.Unmarshal(w.buf, &a); err != nil {
				return nil, err
			}
			if a.Revision > 0 {
				index = max(index, a.Revision)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	bar := report.NewBar(r0.cfg.Progress, "crosswatch", int64(cfg.WatchRounds))
	defer bar.Finish()
	var lat, fromSend []time.Duration
	cpu := clusterCPU(ctx, runs)
	loader0 := report.ProcessCPU()
	for i := range cfg.WatchRounds {
		writer, reader := i%len(runs), (i+1)%len(runs)
		putDigits(t.body[round:round+6], uint64(i+1)%1_000_000)
		a, err := wake(ctx, watchers[reader], qpath+"?wait=10s&index="+strconv.FormatUint(index, 10), regs[writer], "/v1/instances", t.body)
		if err != nil {
			return nil, err
		}
		if a.rev <= index {
			return nil, fmt.Errorf("round %d: the blocking query on server %d answered revision %d, not newer than %d", i, reader, a.rev, index)
		}
		lat = append(lat, a.afterAnswer)
		fromSend = append(fromSend, a.afterSend)
		index = a.rev
		bar.Add(1)
	}
	res := &Latency{Rounds: len(lat), TargetP99Ms: 100}
	res.P50Ms, res.P99Ms, res.MaxMs = percentiles(lat)
	res.FromSendP50Ms, res.FromSendP99Ms, _ = percentiles(fromSend)
	res.LoaderCPUSeconds = report.Round3(report.ProcessCPU() - loader0)
	if s, ok := cpu(ctx); ok {
		res.ServerCPUSeconds = &s
	}
	res.Note = "p50/p99: from the register's 200 answer on one server to the answer of a blocking query parked on the next server (0 when that came first); from_send: from sending the register (includes its commit)"
	return res, nil
}

func indexOf(b []byte, s string) int {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return i + len(s)
		}
	}
	return -1
}

// clusterJoin: preload JoinInstances through every server, then start one
// more server and time it until /readyz answers 200 and it serves them all.
func clusterJoin(ctx context.Context, cfg ClusterConfig, runs []*run) (*ClusterJoin, error) {
	res := &ClusterJoin{Instances: cfg.JoinInstances, TargetSeconds: 5}
	start := time.Now()
	per := (cfg.JoinInstances + len(runs) - 1) / len(runs)
	var wg sync.WaitGroup
	errs := make([]error, len(runs))
	for i, r := range runs {
		n := min(per, cfg.JoinInstances-i*per)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.preload(ctx, "join preload "+strconv.Itoa(i), "cjoin-"+strconv.Itoa(i)+"-", "cjoin"+strconv.Itoa(i)+"-", n, 0)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res.PreloadSecond = report.Round3(time.Since(start).Seconds())
	// The registry holds the instances once every server lists them.
	holds := func(r *run) (int, error) { return r.registryHolds(ctx) }
	for _, r := range runs {
		for {
			n, err := holds(r)
			if err != nil {
				return nil, err
			}
			if n >= cfg.JoinInstances {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	began := time.Now()
	u, stop, err := cfg.Join(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		resp, err := hc.Get(u + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(began) > 5*time.Minute {
			return nil, fmt.Errorf("the joining server %s was not ready in 5 minutes", u)
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.ReadySeconds = report.Round3(time.Since(began).Seconds())
	jr, err := newPlainRun(u, Config{Server: u, Namespace: cfg.Namespace})
	if err != nil {
		return nil, err
	}
	if res.ServedCount, err = jr.registryHolds(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// percentiles are the p50, p99 and max of d in milliseconds (d is sorted).
func percentiles(d []time.Duration) (p50, p99, maxMs float64) {
	s := report.Summarize(d)
	return s.P50Ms, s.P99Ms, s.MaxMs
}
