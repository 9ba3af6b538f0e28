// Package kubepush is the load generator behind "sextant bench push --peer
// istiod": Sextant and a stock istiod, each in a process of its own, read
// the same real kube-apiserver (test/kube's kube-testserver), into which
// the bench writes Services, Pods, EndpointSlices, DestinationRules and
// VirtualServices; state-of-the-world ADS subscribers, the same code for
// both, see each change arrive by its content. The two run in turn, on the
// same workload, and the figures come with their ratio.
package kubepush

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// Config is one run.
type Config struct {
	KubeTestServer string // test/kube's kube-testserver binary
	Istiod         string // istiod (pilot-discovery) binary
	Sextant        string // sextant binary
	IstioCRDs      string // Istio's crd-all.gen.yaml; "": from the module cache
	Services       int    // default 200
	Endpoints      int    // default 2000
	Subscribers    int    // default 200
	// Duration of each churn phase (endpoints alone, then under config
	// changes), default 20s.
	Duration    time.Duration
	ChurnPerSec int           // endpoint changes per second, default 100
	ConfigEvery time.Duration // a VirtualService or DestinationRule change at most this often, default 1s
	DRChanges   int           // DestinationRule changes one at a time for the CPU figure, default 20
	Rounds      int           // Sextant then istiod, then istiod then Sextant, ...; default 1
	Progress    io.Writer     // progress bars; nil: none
	Logs        io.Writer     // the API server's and control planes' logs; nil: none
}

func (c *Config) defaults() {
	if c.Services <= 0 {
		c.Services = 200
	}
	if c.Endpoints <= 0 {
		c.Endpoints = 2000
	}
	if c.Subscribers <= 0 {
		c.Subscribers = 200
	}
	if c.Duration <= 0 {
		c.Duration = 20 * time.Second
	}
	if c.ChurnPerSec <= 0 {
		c.ChurnPerSec = 100
	}
	if c.ConfigEvery <= 0 {
		c.ConfigEvery = time.Second
	}
	if c.DRChanges <= 0 {
		c.DRChanges = 20
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
}

// Figures are one control plane's, in one round (or the median of its
// rounds). Times are from before the API server write until the subscriber
// read the response: "all" until the last subscriber had it, "each" per
// subscriber.
type Figures struct {
	Peer  string  `json:"peer"`
	SyncS float64 `json:"sync_s"` // connect until every subscriber had everything
	// Endpoint changes alone.
	EndpointChanges   int     `json:"endpoint_changes"`
	EndpointAllP50MS  float64 `json:"endpoint_all_p50_ms"`
	EndpointAllP99MS  float64 `json:"endpoint_all_p99_ms"`
	EndpointEachP99MS float64 `json:"endpoint_each_p99_ms"`
	// Endpoint changes written while a config change was out, and the
	// config changes (VirtualService and DestinationRule in turn, one out
	// at a time).
	EndpointDuringConfigChanges  int     `json:"endpoint_during_config_changes"`
	EndpointDuringConfigAllP99MS float64 `json:"endpoint_during_config_all_p99_ms"`
	ConfigChanges                int     `json:"config_changes"`
	ConfigAllP50MS               float64 `json:"config_all_p50_ms"`
	ConfigAllP99MS               float64 `json:"config_all_p99_ms"`
	// DestinationRule changes one at a time, nothing else changing: the
	// control plane's CPU per change.
	DRChanges         int     `json:"dr_changes"`
	DRAllP99MS        float64 `json:"dr_all_p99_ms"`
	CPUPerDRChangeMS  float64 `json:"cpu_per_dr_change_ms"`
	MemoryPerStreamKB float64 `json:"memory_per_stream_kb"` // RSS after the sync less before, per subscriber
	RSSIdleMB         float64 `json:"rss_idle_mb"`          // before the subscribers connected
	ChurnCPUS         float64 `json:"churn_cpu_s"`          // the control plane's CPU in both churn phases
	// Responses read by the subscribers, all phases: every subscriber
	// counted deliveries.
	Responses   uint64 `json:"responses"`
	Undelivered int    `json:"undelivered"` // changes some subscriber had not had 30 s after their phase
	LoadAvg     string `json:"loadavg"`     // at the end of the round
}

// Ratios are istiod's figure over Sextant's: above 1, Sextant is ahead.
type Ratios struct {
	EndpointAllP99          float64 `json:"endpoint_all_p99_x"`
	EndpointDuringConfigP99 float64 `json:"endpoint_during_config_all_p99_x"`
	ConfigAllP99            float64 `json:"config_all_p99_x"`
	CPUPerDRChange          float64 `json:"cpu_per_dr_change_x"`
	MemoryPerStream         float64 `json:"memory_per_stream_x"`
	SyncS                   float64 `json:"sync_x"`
}

// Result is the JSON object "sextant bench push --peer istiod" prints.
type Result struct {
	Scenario      string    `json:"scenario"`
	Protocol      string    `json:"protocol"`
	Services      int       `json:"services"`
	Endpoints     int       `json:"endpoints"`
	Subscribers   int       `json:"subscribers"`
	DurationS     float64   `json:"duration_s"`
	ChurnPerSec   int       `json:"churn_per_s"`
	ConfigEveryMS float64   `json:"config_every_ms"`
	LoadS         float64   `json:"load_s"` // writing the workload into the API server
	Rounds        []Figures `json:"rounds"` // in the order run
	Sextant       Figures   `json:"sextant"`
	Istiod        Figures   `json:"istiod"`
	Ratio         Ratios    `json:"ratio"`
	LoadAvgStart  string    `json:"loadavg_start"`
	LoadAvgEnd    string    `json:"loadavg_end"`
}

// Run starts the API server, writes the workload, runs the rounds and
// writes the Result as one JSON object.
func Run(ctx context.Context, cfg Config, out io.Writer) (Result, error) {
	cfg.defaults()
	res := Result{
		Scenario: fmt.Sprintf("kube_%d_services_%d_endpoints", cfg.Services, cfg.Endpoints), Protocol: "sotw",
		Services: cfg.Services, Endpoints: cfg.Endpoints, Subscribers: cfg.Subscribers,
		DurationS: cfg.Duration.Seconds(), ChurnPerSec: cfg.ChurnPerSec, ConfigEveryMS: float64(cfg.ConfigEvery.Milliseconds()),
		LoadAvgStart: report.LoadAvgText(),
	}
	if cfg.Services > 250 {
		return res, fmt.Errorf("kubepush: --services %d: the test API server's service range holds about 250", cfg.Services)
	}
	for _, b := range []struct{ name, path string }{{"kube-testserver", cfg.KubeTestServer}, {"istiod", cfg.Istiod}, {"sextant", cfg.Sextant}} {
		if b.path == "" {
			return res, fmt.Errorf("kubepush: no %s binary given", b.name)
		}
	}
	crds := cfg.IstioCRDs
	if crds == "" {
		var err error
		if crds, err = IstioCRDFile(ctx); err != nil {
			return res, err
		}
	}
	a, err := startAPIServer(ctx, cfg.KubeTestServer, cfg.Logs)
	if err != nil {
		return res, err
	}
	defer a.stop()
	start := time.Now()
	if err := a.installCRDs(ctx, crds); err != nil {
		return res, err
	}
	var written atomic.Int64
	bar := report.NewPollBar(ctx, cfg.Progress, "workload written to the API server", int64(3*cfg.Services+cfg.Endpoints+cfg.Services), written.Load)
	w, err := a.load(ctx, cfg.Services, cfg.Endpoints, func() { written.Add(1) })
	bar.Finish()
	if err != nil {
		return res, err
	}
	res.LoadS = report.Round3(time.Since(start).Seconds())

	var sx, is []Figures
	for r := range cfg.Rounds {
		order := []string{"sextant", "istiod"}
		if r%2 == 1 {
			order = []string{"istiod", "sextant"}
		}
		for _, peer := range order {
			f, err := runRound(ctx, &cfg, a, w, peer)
			if err != nil {
				return res, fmt.Errorf("round %d, %s: %w", r+1, peer, err)
			}
			res.Rounds = append(res.Rounds, f)
			if peer == "sextant" {
				sx = append(sx, f)
			} else {
				is = append(is, f)
			}
		}
	}
	res.Sextant, res.Istiod = median(sx), median(is)
	s, i := res.Sextant, res.Istiod
	res.Ratio = Ratios{
		EndpointAllP99:          ratio(i.EndpointAllP99MS, s.EndpointAllP99MS),
		EndpointDuringConfigP99: ratio(i.EndpointDuringConfigAllP99MS, s.EndpointDuringConfigAllP99MS),
		ConfigAllP99:            ratio(i.ConfigAllP99MS, s.ConfigAllP99MS),
		CPUPerDRChange:          ratio(i.CPUPerDRChangeMS, s.CPUPerDRChangeMS),
		MemoryPerStream:         ratio(i.MemoryPerStreamKB, s.MemoryPerStreamKB),
		SyncS:                   ratio(i.SyncS, s.SyncS),
	}
	res.LoadAvgEnd = report.LoadAvgText()
	return res, report.Print(out, res)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return report.Round3(a / b)
}

// median is each figure's median over the rounds (the lower middle one).
func median(fs []Figures) Figures {
	if len(fs) == 0 {
		return Figures{}
	}
	m := fs[0]
	med := func(get func(Figures) float64) float64 {
		v := make([]float64, len(fs))
		for i, f := range fs {
			v[i] = get(f)
		}
		slices.Sort(v)
		return v[(len(v)-1)/2]
	}
	m.SyncS = med(func(f Figures) float64 { return f.SyncS })
	m.EndpointAllP50MS = med(func(f Figures) float64 { return f.EndpointAllP50MS })
	m.EndpointAllP99MS = med(func(f Figures) float64 { return f.EndpointAllP99MS })
	m.EndpointEachP99MS = med(func(f Figures) float64 { return f.EndpointEachP99MS })
	m.EndpointDuringConfigAllP99MS = med(func(f Figures) float64 { return f.EndpointDuringConfigAllP99MS })
	m.ConfigAllP50MS = med(func(f Figures) float64 { return f.ConfigAllP50MS })
	m.ConfigAllP99MS = med(func(f Figures) float64 { return f.ConfigAllP99MS })
	m.DRAllP99MS = med(func(f Figures) float64 { return f.DRAllP99MS })
	m.CPUPerDRChangeMS = med(func(f Figures) float64 { return f.CPUPerDRChangeMS })
	m.MemoryPerStreamKB = med(func(f Figures) float64 { return f.MemoryPerStreamKB })
	m.RSSIdleMB = med(func(f Figures) float64 { return f.RSSIdleMB })
	m.ChurnCPUS = med(func(f Figures) float64 { return f.ChurnCPUS })
	m.LoadAvg = ""
	return m
}

func pct(d []time.Duration, q float64) float64 {
	slices.Sort(d)
	return report.Ms(report.Quantile(d, q))
}

// round is one control plane's run: its process, subscribers and tracker.
type round struct {
	cfg  *Config
	w    *workload
	cp   *controlPlane
	tr   *tracker
	errs chan error
	// writes in flight, waited for at the end of each phase
	wwg sync.WaitGroup
}

// runRound starts peer, connects the subscribers and runs the phases.
func runRound(ctx context.Context, cfg *Config, a *apiServer, w *workload, peer string) (Figures, error) {
	f := Figures{Peer: peer}
	var cp *controlPlane
	var err error
	if peer == "sextant" {
		cp, err = startSextant(ctx, cfg.Sextant, a.kubeconfig, cfg.Logs)
	} else {
		cp, err = startIstiod(ctx, cfg.Istiod, a.kubeconfig, cfg.Logs)
	}
	if err != nil {
		return f, err
	}
	defer cp.stop()
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "%s: ready, xDS %s\n", peer, cp.xds)
	}
	rss0, err := cp.rssBytes()
	if err != nil {
		return f, err
	}
	f.RSSIdleMB = report.Round3(float64(rss0) / (1 << 20))

	ctx, cancel := context.WithCancel(ctx)
	r := &round{cfg: cfg, w: w, cp: cp, tr: newTracker(cfg.Subscribers), errs: make(chan error, cfg.Subscribers+1)}
	var wg sync.WaitGroup
	// Cancel first: the subscribers and the writes' followers end with ctx.
	defer wg.Wait()
	defer r.wwg.Wait()
	defer cancel()
	conns := make([]*grpc.ClientConn, 0, cfg.Subscribers)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	subs := make([]*subscriber, cfg.Subscribers)
	up := cfg.Endpoints - w.downCount()
	bar := report.NewBar(cfg.Progress, peer+": subscribers synced", int64(cfg.Subscribers))
	start := time.Now()
	for i := range subs {
		conn, err := dial(cp.xds)
		if err != nil {
			return f, err
		}
		conns = append(conns, conn)
		s := &subscriber{id: i, ns: Namespace, conn: conn, t: r.tr, synced: make(chan struct{}), wantAddrs: up}
		subs[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(ctx); err != nil {
				r.errs <- fmt.Errorf("subscriber %d: %w", s.id, err)
			}
		}()
	}
	timeout := time.After(10 * time.Minute)
	for _, s := range subs {
		select {
		case <-s.synced:
			bar.Add(1)
		case err := <-r.errs:
			return f, err
		case <-timeout:
			return f, errors.New("kubepush: the subscribers did not all sync in 10 minutes")
		case <-ctx.Done():
			return f, ctx.Err()
		}
	}
	bar.Finish()
	f.SyncS = report.Round3(time.Since(start).Seconds())
	rss1, err := cp.rssBytes()
	if err != nil {
		return f, err
	}
	f.MemoryPerStreamKB = report.Round3(float64(rss1-rss0) / 1024 / float64(cfg.Subscribers))

	cpu0, err := cp.cpuSeconds()
	if err != nil {
		return f, err
	}
	// Endpoint changes alone.
	if err := r.churn(ctx, peer+": endpoint churn", false); err != nil {
		return f, err
	}
	f.Undelivered += r.drain(ctx)
	r.tr.mu.Lock()
	f.EndpointChanges = len(r.tr.all[kindEndpoint])
	f.EndpointAllP50MS, f.EndpointAllP99MS = pct(r.tr.all[kindEndpoint], 0.5), pct(r.tr.all[kindEndpoint], 0.99)
	f.EndpointEachP99MS = pct(r.tr.each[kindEndpoint], 0.99)
	r.tr.mu.Unlock()
	r.tr.reset()

	// Endpoint changes under config changes.
	if err := r.churn(ctx, peer+": endpoint and config churn", true); err != nil {
		return f, err
	}
	f.Undelivered += r.drain(ctx)
	r.tr.mu.Lock()
	f.EndpointDuringConfigChanges = len(r.tr.duringAll)
	f.EndpointDuringConfigAllP99MS = pct(r.tr.duringAll, 0.99)
	cfgAll := slices.Concat(r.tr.all[kindVirtualService], r.tr.all[kindDestinationRule])
	f.ConfigChanges = len(cfgAll)
	f.ConfigAllP50MS, f.ConfigAllP99MS = pct(cfgAll, 0.5), pct(cfgAll, 0.99)
	r.tr.mu.Unlock()
	r.tr.reset()
	cpu1, err := cp.cpuSeconds()
	if err != nil {
		return f, err
	}
	f.ChurnCPUS = report.Round3(cpu1 - cpu0)

	// DestinationRule changes one at a time.
	for k := range cfg.DRChanges {
		_, svc, gen := w.nextConfig()
		if gen%2 == 0 {
			_, svc, gen = w.nextConfig() // a DestinationRule's turn
		}
		c := &change{kind: kindDestinationRule, svc: serviceName(svc), outlier: uint32(gen), start: time.Now()}
		r.tr.add(c)
		if err := w.writeConfig(ctx, kindDestinationRule, svc, gen); err != nil {
			return f, err
		}
		select {
		case <-c.done:
		case <-time.After(time.Minute):
			return f, fmt.Errorf("kubepush: DestinationRule change %d of %s not at every subscriber after a minute", k+1, peer)
		case err := <-r.errs:
			return f, err
		case <-ctx.Done():
			return f, ctx.Err()
		}
	}
	cpu2, err := cp.cpuSeconds()
	if err != nil {
		return f, err
	}
	r.tr.mu.Lock()
	f.DRChanges = len(r.tr.all[kindDestinationRule])
	f.DRAllP99MS = pct(r.tr.all[kindDestinationRule], 0.99)
	r.tr.mu.Unlock()
	f.CPUPerDRChangeMS = report.Round3((cpu2 - cpu1) * 1000 / float64(cfg.DRChanges))
	for _, s := range subs {
		f.Responses += s.responses.Load()
	}
	f.LoadAvg = report.LoadAvgText()
	return f, nil
}

// churn writes endpoint changes at ChurnPerSec (up to 16 in flight) for
// Duration and, withConfig, a VirtualService or DestinationRule change
// every ConfigEvery when none is out.
func (r *round) churn(ctx context.Context, desc string, withConfig bool) error {
	const maxInFlight = 16
	slots := make(chan struct{}, maxInFlight)
	var (
		emu  sync.Mutex
		werr error
	)
	fail := func(err error) {
		emu.Lock()
		if werr == nil {
			werr = err
		}
		emu.Unlock()
	}
	tick := time.NewTicker(time.Second / time.Duration(r.cfg.ChurnPerSec))
	defer tick.Stop()
	var cfgTick <-chan time.Time
	if withConfig {
		t := time.NewTicker(r.cfg.ConfigEvery)
		defer t.Stop()
		cfgTick = t.C
	}
	end := time.After(r.cfg.Duration)
	bar := report.NewTimeBar(ctx, r.cfg.Progress, desc, r.cfg.Duration)
	defer bar.Finish()
	for {
		select {
		case <-tick.C:
		case <-cfgTick:
			if r.tr.pending(kindVirtualService)+r.tr.pending(kindDestinationRule) > 0 {
				continue
			}
			kind, svc, gen := r.w.nextConfig()
			c := &change{kind: kind, svc: serviceName(svc), start: time.Now()}
			if kind == kindVirtualService {
				c.marker = []byte(vsMarker(colors[0], gen))
			} else {
				c.outlier = uint32(gen)
			}
			r.tr.add(c)
			r.wwg.Add(1)
			go func() {
				defer r.wwg.Done()
				if err := r.w.writeConfig(ctx, kind, svc, gen); err != nil {
					fail(err)
				}
			}()
			continue
		case <-end:
			r.wwg.Wait()
			return werr
		case err := <-r.errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
		emu.Lock()
		err := werr
		emu.Unlock()
		if err != nil {
			r.wwg.Wait()
			return err
		}
		select {
		case slots <- struct{}{}:
		default:
			continue // maxInFlight writes out: the API server is behind
		}
		j, up, ok := r.w.nextEndpoint()
		if !ok {
			<-slots
			continue
		}
		c := &change{kind: kindEndpoint, svc: serviceName(endpointService(j, r.w.services)),
			color: endpointColor(j, r.w.services), addr: []byte(endpointAddr(j)), up: up, start: time.Now(),
			during: withConfig && r.tr.pending(kindVirtualService)+r.tr.pending(kindDestinationRule) > 0}
		r.tr.add(c)
		r.wwg.Add(2)
		go func() {
			defer r.wwg.Done()
			defer func() { <-slots }()
			if err := r.w.setEndpoint(ctx, j, up); err != nil {
				fail(err)
			}
		}()
		go func() {
			// The endpoint is free again once its change is everywhere
			// (or given up on at the end of the phase).
			defer r.wwg.Done()
			select {
			case <-c.done:
			case <-c.dropped:
			case <-ctx.Done():
			}
			r.w.settle(j)
		}()
	}
}

// drain waits up to 30 s for the changes out to arrive everywhere, then
// gives up on the rest and returns how many.
func (r *round) drain(ctx context.Context) int {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n := 0
		for k := range r.tr.open {
			n += r.tr.pending(k)
		}
		if n == 0 {
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r.tr.drop()
}
