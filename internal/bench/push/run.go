package push

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/sextant-mesh/sextant/internal/bench/report"
	engine "github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// Config is one run. Zero values take the seed's scenario with 100
// subscribers.
type Config struct {
	Services    int           // default 2200
	Endpoints   int           // default 20000
	Subscribers int           // default 100
	Delta       bool          // delta xDS; false: state of the world
	Duration    time.Duration // churn time, default 20s
	ChurnPerSec int           // instance changes per second, default 100
	ConfigEvery time.Duration // a VirtualService or DestinationRule change every, default 100ms
	Resyncs     int           // full recomputations timed after loading, default 3
	// ChurnOnlyDuringConfig commits endpoint changes only while a config
	// change has not reached every subscriber yet (the config path is
	// recomputing, encoding or sending), so that every endpoint figure is
	// one under config work.
	ChurnOnlyDuringConfig bool
	// SidecarImport, when set, applies a Sidecar in the subscribers'
	// namespace importing this many services (REGISTRY_ONLY): each
	// subscriber is then sent those only, and only their changes are
	// awaited (the others are still committed and recomputed).
	SidecarImport int
	Progress      io.Writer // progress bars; nil: none
	Profile       io.Writer // CPU profile of the churn phase; nil: none
}

// Result is the JSON object "sextant bench push" prints.
type Result struct {
	Scenario    string  `json:"scenario"`
	Protocol    string  `json:"protocol"`
	Services    int     `json:"services"`
	Clusters    int     `json:"clusters"`
	Endpoints   int     `json:"endpoints"`
	Subscribers int     `json:"subscribers"`
	DurationS   float64 `json:"duration_s"`

	// Full recomputation of every cluster and route (a config round over
	// all services): at start and the median of the timed resyncs.
	FullRecomputeStartMS  float64 `json:"full_recompute_start_ms"`
	FullRecomputeMedianMS float64 `json:"full_recompute_median_ms"`
	FullEndpointsStartMS  float64 `json:"full_endpoints_start_ms"`

	// Endpoint changes: from commit to received by every subscriber (per
	// change, the last subscriber), and per subscriber.
	EndpointChanges   int     `json:"endpoint_changes"`
	EndpointAllP50MS  float64 `json:"endpoint_all_p50_ms"`
	EndpointAllP99MS  float64 `json:"endpoint_all_p99_ms"`
	EndpointAllMaxMS  float64 `json:"endpoint_all_max_ms"`
	EndpointEachP50MS float64 `json:"endpoint_each_p50_ms"`
	EndpointEachP99MS float64 `json:"endpoint_each_p99_ms"`
	// Endpoint changes committed while a config change had not reached
	// every subscriber yet (all of them with ChurnOnlyDuringConfig).
	EndpointDuringConfigChanges   int     `json:"endpoint_during_config_changes"`
	EndpointDuringConfigAllP50MS  float64 `json:"endpoint_during_config_all_p50_ms"`
	EndpointDuringConfigAllP99MS  float64 `json:"endpoint_during_config_all_p99_ms"`
	EndpointDuringConfigEachP99MS float64 `json:"endpoint_during_config_each_p99_ms"`
	// Config changes, the same way.
	ConfigChanges   int     `json:"config_changes"`
	ConfigAllP50MS  float64 `json:"config_all_p50_ms"`
	ConfigAllP99MS  float64 `json:"config_all_p99_ms"`
	ConfigAllMaxMS  float64 `json:"config_all_max_ms"`
	ConfigEachP50MS float64 `json:"config_each_p50_ms"`
	ConfigEachP99MS float64 `json:"config_each_p99_ms"`
	// The same by kind: DestinationRule changes (each a cluster list to
	// every subscriber in state of the world) and VirtualService changes.
	ConfigDRAllP50MS float64 `json:"config_dr_all_p50_ms"`
	ConfigDRAllP99MS float64 `json:"config_dr_all_p99_ms"`
	ConfigVSAllP50MS float64 `json:"config_vs_all_p50_ms"`
	ConfigVSAllP99MS float64 `json:"config_vs_all_p99_ms"`
	// Changes some subscriber had not received 5 s after the churn ended.
	Undelivered int `json:"undelivered"`
	// Responses the server sent during the churn (and its 5 s drain), per
	// subscriber per second, and the process's CPU per change: what a
	// change costs, less sensitive to the machine's load than latency.
	ResponsesPerSubPerSec float64 `json:"responses_per_sub_per_s"`
	CPUMSPerChange        float64 `json:"cpu_ms_per_change"`

	// Heap and goroutine stacks per subscriber, once all had every
	// resource: the server's side and the bench's own (connection, stream,
	// reader) together, an upper bound of the server's share.
	HeapPerSubscriberBytes int64 `json:"heap_per_subscriber_bytes"`
	// SidecarImport is Config.SidecarImport; BytesPerSubscriber the xDS
	// bytes each subscriber received during the churn (mean).
	SidecarImport      int     `json:"sidecar_import,omitempty"`
	BytesPerSubscriber int64   `json:"bytes_per_subscriber"`
	HeapBeforeBytes    int64   `json:"heap_before_bytes"`
	HeapAfterBytes     int64   `json:"heap_after_bytes"`
	SyncS              float64 `json:"sync_s"`
	MaxRSSBytes        int64   `json:"max_rss_bytes"`
	CPUSeconds         float64 `json:"cpu_s"`
	LoadAvgStart       string  `json:"loadavg_start"`
	LoadAvgEnd         string  `json:"loadavg_end"`
}

func (c *Config) defaults() {
	if c.Services <= 0 {
		c.Services = 2200
	}
	if c.Endpoints <= 0 {
		c.Endpoints = 20000
	}
	if c.Subscribers <= 0 {
		c.Subscribers = 100
	}
	if c.Duration <= 0 {
		c.Duration = 20 * time.Second
	}
	if c.ChurnPerSec <= 0 {
		c.ChurnPerSec = 100
	}
	if c.ConfigEvery <= 0 {
		c.ConfigEvery = 100 * time.Millisecond
	}
	if c.Resyncs < 0 {
		c.Resyncs = 0
	} else if c.Resyncs == 0 {
		c.Resyncs = 3
	}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func heap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// responses counts the responses the server has sent on open streams.
func responses(ads *xds.Server) uint64 {
	var n uint64
	for _, s := range ads.Status() {
		for _, t := range s.Types {
			n += t.Responses
		}
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func (c *Config) bar(n int, desc string) *progressbar.ProgressBar {
	w := c.Progress
	if w == nil {
		w = io.Discard
	}
	return progressbar.NewOptions(n, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
}

// Run runs the scenario once and writes its Result as one JSON object.
func Run(ctx context.Context, cfg Config, out io.Writer) (Result, error) {
	cfg.defaults()
	res := Result{
		Scenario: fmt.Sprintf("seed001_%d_services_%d_endpoints", cfg.Services, cfg.Endpoints), Protocol: "sotw",
		Services: cfg.Services, Clusters: cfg.Services * len(colors), Endpoints: cfg.Endpoints, Subscribers: cfg.Subscribers,
		LoadAvgStart: report.LoadAvgText(),
	}
	if cfg.Delta {
		res.Protocol = "delta"
	}
	reg := pushtest.New(1 << 20)
	if err := Load(reg, cfg.Services, cfg.Endpoints); err != nil {
		return res, err
	}
	imported := cfg.Services
	if cfg.SidecarImport > 0 {
		imported = min(cfg.SidecarImport, cfg.Services)
		o, err := sidecar(imported)
		if err != nil {
			return res, err
		}
		reg.ApplyConfig(o)
		res.SidecarImport = imported
	}
	cache := xds.NewCache()
	eng := engine.New(reg, cache, engine.Options{})
	ads := xds.NewServer(cache, xds.ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); eng.Run(ctx) }()
	go func() { defer wg.Done(); ads.Serve(ctx, lis) }()
	defer wg.Wait()
	defer cancel()

	// Wait for the full computation, then time resyncs of everything.
	want := [4]int{xds.TypeCluster: imported * len(colors), xds.TypeEndpoint: imported * len(colors), xds.TypeListener: 1, xds.TypeRoute: imported}
	for eng.Status().FullEndpointsMS == 0 || cache.Len(xds.TypeCluster) < res.Clusters {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := eng.Status()
	res.FullRecomputeStartMS, res.FullEndpointsStartMS = st.FullConfigMS, st.FullEndpointsMS
	var rounds []time.Duration
	for range cfg.Resyncs {
		before := eng.Status().ConfigRounds
		if err := eng.Resync(ctx); err != nil {
			return res, err
		}
		for eng.Status().ConfigRounds == before || eng.Status().EndpointQueue > 0 {
			time.Sleep(5 * time.Millisecond)
		}
		rounds = append(rounds, time.Duration(eng.Status().LastConfigRoundMS*float64(time.Millisecond)))
	}
	res.FullRecomputeMedianMS = ms(pct(rounds, 0.5))

	// Subscribers connect and receive everything.
	res.HeapBeforeBytes = heap()
	tr := newTracker(cfg.Subscribers)
	subs := make([]*subscriber, cfg.Subscribers)
	bar := cfg.bar(cfg.Subscribers, "subscribers synced")
	start := time.Now()
	errs := make(chan error, cfg.Subscribers)
	for i := range subs {
		conn, err := dialSubscriber(lis.Addr().String())
		if err != nil {
			return res, err
		}
		defer conn.Close()
		s := &subscriber{id: i, delta: cfg.Delta, conn: conn, t: tr, synced: make(chan struct{})}
		subs[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(ctx, want); err != nil {
				errs <- err
			}
		}()
	}
	timeout := time.After(5 * time.Minute)
	for _, s := range subs {
		select {
		case <-s.synced:
			bar.Add(1)
		case err := <-errs:
			return res, err
		case <-timeout:
			return res, errNotSynced
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	bar.Finish()
	res.SyncS = time.Since(start).Seconds()
	res.HeapAfterBytes = heap()
	res.HeapPerSubscriberBytes = (res.HeapAfterBytes - res.HeapBeforeBytes) / int64(cfg.Subscribers)

	// Churn: endpoints at ChurnPerSec, config every ConfigEvery.
	ch := &churner{reg: reg, rng: rand.New(rand.NewPCG(1, 2)), services: cfg.Services, endpoints: cfg.Endpoints, down: map[int]bool{},
		minDown: time.Second}
	commit := func(kind int, typ xds.Type, name string, f func()) {
		if serviceIndex(name) < imported { // the others reach no subscriber
			tr.expect(kind, typ, name, reg.Revision()+1, time.Now())
		}
		f()
	}
	var rx0 int64
	for _, s := range subs {
		rx0 += s.rx.Load()
	}
	cpu0 := cpuSeconds()
	resp0 := responses(ads)
	if cfg.Profile != nil {
		if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
			return res, err
		}
	}
	epTick := time.NewTicker(time.Second / time.Duration(cfg.ChurnPerSec))
	cfgTick := time.NewTicker(cfg.ConfigEvery)
	end := time.After(cfg.Duration)
	cbar := cfg.bar(int(cfg.Duration/time.Second), "churn (s)")
	sec := time.NewTicker(time.Second)
	// The endpoint rate is kept by the clock: a ticker drops ticks while
	// this goroutine waits for a core (at load 25, 100/s became 40-60/s).
	churnStart, due := time.Now(), 0
churn:
	for {
		select {
		case <-epTick.C:
			now := int(time.Since(churnStart) * time.Duration(cfg.ChurnPerSec) / time.Second)
			for ; due < now; due++ {
				if cfg.ChurnOnlyDuringConfig && !tr.configPending() {
					continue
				}
				ch.endpointChange(func(name string, f func()) { commit(0, xds.TypeEndpoint, name, f) })
				res.EndpointChanges++
			}
		case <-cfgTick.C:
			ch.configChange(func(typ xds.Type, name string, f func()) { commit(1, typ, name, f) })
			res.ConfigChanges++
		case <-sec.C:
			cbar.Add(1)
		case err := <-errs:
			return res, err
		case <-end:
			break churn
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	if cfg.Profile != nil {
		pprof.StopCPUProfile()
	}
	epTick.Stop()
	cfgTick.Stop()
	sec.Stop()
	cbar.Finish()
	res.DurationS = cfg.Duration.Seconds()
	for deadline := time.Now().Add(5 * time.Second); tr.pending() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	res.CPUSeconds = cpuSeconds() - cpu0
	var rx int64
	for _, s := range subs {
		rx += s.rx.Load()
	}
	res.BytesPerSubscriber = (rx - rx0) / int64(cfg.Subscribers)
	res.ResponsesPerSubPerSec = float64(responses(ads)-resp0) / float64(cfg.Subscribers) / cfg.Duration.Seconds()
	if n := res.EndpointChanges + res.ConfigChanges; n > 0 {
		res.CPUMSPerChange = res.CPUSeconds * 1000 / float64(n)
	}
	tr.mu.Lock()
	res.Undelivered = tr.open
	res.EndpointAllP50MS, res.EndpointAllP99MS, res.EndpointAllMaxMS = ms(pct(tr.all[0], 0.5)), ms(pct(tr.all[0], 0.99)), ms(pct(tr.all[0], 1))
	res.EndpointEachP50MS, res.EndpointEachP99MS = ms(pct(tr.perSub[0], 0.5)), ms(pct(tr.perSub[0], 0.99))
	res.EndpointDuringConfigChanges = len(tr.duringAll)
	res.EndpointDuringConfigAllP50MS, res.EndpointDuringConfigAllP99MS = ms(pct(tr.duringAll, 0.5)), ms(pct(tr.duringAll, 0.99))
	res.EndpointDuringConfigEachP99MS = ms(pct(tr.duringPerSub, 0.99))
	res.ConfigAllP50MS, res.ConfigAllP99MS, res.ConfigAllMaxMS = ms(pct(tr.all[1], 0.5)), ms(pct(tr.all[1], 0.99)), ms(pct(tr.all[1], 1))
	res.ConfigEachP50MS, res.ConfigEachP99MS = ms(pct(tr.perSub[1], 0.5)), ms(pct(tr.perSub[1], 0.99))
	res.ConfigDRAllP50MS, res.ConfigDRAllP99MS = ms(pct(tr.drAll, 0.5)), ms(pct(tr.drAll, 0.99))
	res.ConfigVSAllP50MS, res.ConfigVSAllP99MS = ms(pct(tr.vsAll, 0.5)), ms(pct(tr.vsAll, 0.99))
	tr.mu.Unlock()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	res.MaxRSSBytes = ru.Maxrss * 1024
	res.LoadAvgEnd = report.LoadAvgText()
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return res, enc.Encode(res)
}
