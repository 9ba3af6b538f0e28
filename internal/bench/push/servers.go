package push

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/sextant-mesh/sextant/internal/bench/report"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// ServersConfig is one run of "sextant bench push --servers N": the
// scenario loaded into real servers sharing one database (cluster mode),
// subscribers spread over the servers' xDS ports, endpoint (and, with
// ConfigEvery, config) changes written to the first server only.
type ServersConfig struct {
	// HTTP are the servers' API base URLs (http://host:port); every write
	// goes to the first, A. XDS are their ADS addresses, in the same order;
	// subscriber i streams from XDS[i mod len].
	HTTP, XDS   []string
	Services    int           // default 2200
	Endpoints   int           // default 20000
	Subscribers int           // default 300 (100 per server of 3)
	Delta       bool          // delta xDS; false: state of the world
	Duration    time.Duration // churn time, default 20s
	ChurnPerSec int           // instance changes per second written to A, default 100
	// ConfigEvery: a VirtualService or DestinationRule change written to A
	// this often (one in flight at a time); 0: none.
	ConfigEvery time.Duration
	// ChurnOnlyDuringConfig: instance changes only while a config change
	// is on its way to the subscribers.
	ChurnOnlyDuringConfig bool
	Progress              io.Writer // progress bars; nil: none
	// Profile, if set, gets a CPU profile of this process (the
	// subscribers) over the churn; ServerProfile one of server A over the
	// same time, from its /debug/pprof (A must run with --pprof).
	Profile, ServerProfile io.Writer
}

// ServersResult is the JSON object "sextant bench push --servers" prints.
type ServersResult struct {
	Scenario    string  `json:"scenario"`
	Protocol    string  `json:"protocol"`
	Servers     int     `json:"servers"`
	Services    int     `json:"services"`
	Clusters    int     `json:"clusters"`
	Endpoints   int     `json:"endpoints"`
	Subscribers int     `json:"subscribers"`
	DurationS   float64 `json:"duration_s"`
	LoadS       float64 `json:"load_s"` // writing the scenario to A until every server published it
	SyncS       float64 `json:"sync_s"` // until every subscriber had every resource

	// Endpoint changes written to A: from before the write until every
	// subscriber on every server had it (per change, the last one), and
	// per subscriber.
	EndpointChanges   int     `json:"endpoint_changes"`
	EndpointAllP50MS  float64 `json:"endpoint_all_p50_ms"`
	EndpointAllP99MS  float64 `json:"endpoint_all_p99_ms"`
	EndpointAllMaxMS  float64 `json:"endpoint_all_max_ms"`
	EndpointEachP50MS float64 `json:"endpoint_each_p50_ms"`
	EndpointEachP99MS float64 `json:"endpoint_each_p99_ms"`
	// The same per server (A first): the last of its subscribers.
	PerServer []ServerFigures `json:"per_server"`
	// With ConfigEvery: endpoint changes written while a config change had
	// not reached every subscriber yet, and the config changes themselves,
	// the same way (config_skipped_ticks: ticks that found the last config
	// write still out).
	EndpointDuringConfigChanges   int     `json:"endpoint_during_config_changes,omitempty"`
	EndpointDuringConfigAllP50MS  float64 `json:"endpoint_during_config_all_p50_ms,omitempty"`
	EndpointDuringConfigAllP99MS  float64 `json:"endpoint_during_config_all_p99_ms,omitempty"`
	EndpointDuringConfigEachP99MS float64 `json:"endpoint_during_config_each_p99_ms,omitempty"`
	ConfigChanges                 int     `json:"config_changes,omitempty"`
	ConfigAllP50MS                float64 `json:"config_all_p50_ms,omitempty"`
	ConfigAllP99MS                float64 `json:"config_all_p99_ms,omitempty"`
	ConfigEachP99MS               float64 `json:"config_each_p99_ms,omitempty"`
	ConfigDRAllP50MS              float64 `json:"config_dr_all_p50_ms,omitempty"`
	ConfigDRAllP99MS              float64 `json:"config_dr_all_p99_ms,omitempty"`
	ConfigVSAllP50MS              float64 `json:"config_vs_all_p50_ms,omitempty"`
	ConfigVSAllP99MS              float64 `json:"config_vs_all_p99_ms,omitempty"`
	ConfigSkippedTicks            int     `json:"config_skipped_ticks,omitempty"`
	// Ticks skipped because maxInFlight writes were still out: the rate
	// written is endpoint_changes / duration_s.
	SkippedTicks int `json:"skipped_ticks"`
	// The write's own round trip (commit in the database, A's catalog).
	WriteP50MS float64 `json:"write_p50_ms"`
	WriteP99MS float64 `json:"write_p99_ms"`
	// Changes some subscriber had not received 5 s after the churn ended.
	Undelivered int `json:"undelivered"`

	// CPU seconds during the churn: the bench's process (the subscribers)
	// and each server (process_cpu_seconds_total of its /metrics).
	BenchCPUSeconds   float64   `json:"bench_cpu_s"`
	ServerCPUSeconds  []float64 `json:"server_cpu_s"`
	ResponsesPerSubPS float64   `json:"responses_per_sub_per_s"`
	LoadAvgStart      string    `json:"loadavg_start"`
	LoadAvgEnd        string    `json:"loadavg_end"`
}

// ServerFigures are one server's subscribers' figures.
type ServerFigures struct {
	Server      string  `json:"server"`
	Subscribers int     `json:"subscribers"`
	AllP50MS    float64 `json:"all_p50_ms"`
	AllP99MS    float64 `json:"all_p99_ms"`
	EachP99MS   float64 `json:"each_p99_ms"`
}

func (c *ServersConfig) defaults() {
	d := Config{Services: c.Services, Endpoints: c.Endpoints, Subscribers: c.Subscribers, Duration: c.Duration, ChurnPerSec: c.ChurnPerSec}
	if d.Subscribers <= 0 {
		d.Subscribers = 100 * len(c.HTTP)
	}
	d.defaults()
	c.Services, c.Endpoints, c.Subscribers, c.Duration, c.ChurnPerSec = d.Services, d.Endpoints, d.Subscribers, d.Duration, d.ChurnPerSec
}

var benchHTTP = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

// post sends body (JSON, or YAML when ctype says so) and decodes the JSON
// answer into out.
func post(ctx context.Context, method, url, ctype string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := benchHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: %s %s: %d %s", method, url, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

type revisionAnswer struct {
	Revision int64 `json:"revision"`
}

// wireInstance is an instance as POST /v1/instances takes it.
func wireInstance(in *instance.Instance) map[string]any {
	return map[string]any{"namespace": in.Namespace, "service": in.Service, "id": in.ID, "host": in.Host,
		"port": in.Port, "weight": in.Weight, "metadata": in.Metadata.Map()}
}

// loadServers writes the scenario to server A: the config objects, then
// the instances, in batches. It returns the last revision written.
func loadServers(ctx context.Context, cfg *ServersConfig) (int64, error) {
	a := cfg.HTTP[0]
	var probe struct {
		Instances []json.RawMessage `json:"instances"`
	}
	if err := post(ctx, "GET", a+"/v1/instances?limit=1", "", nil, &probe); err != nil {
		return 0, err
	}
	if len(probe.Instances) > 0 {
		return 0, fmt.Errorf("bench: the servers' database already holds instances: give --store a fresh database (every subscriber subscribes to everything)")
	}
	var last int64
	bar := report.NewBar(cfg.Progress, "config objects written to A", int64(2*cfg.Services))
	var docs [][]byte
	flush := func() error {
		var r revisionAnswer
		if err := post(ctx, "POST", a+"/v1/config:apply", "application/yaml", bytes.Join(docs, []byte("\n---\n")), &r); err != nil {
			return err
		}
		bar.Add(int64(len(docs)))
		last, docs = max(last, r.Revision), docs[:0]
		return nil
	}
	for i := range cfg.Services {
		for _, o := range []*config.Object{destinationRule(i, 0), virtualService(i, 0)} {
			docs = append(docs, o.Encode())
		}
		if len(docs) >= 500 || i == cfg.Services-1 {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	bar.Finish()
	bar = report.NewBar(cfg.Progress, "instances registered on A", int64(cfg.Endpoints))
	batch := make([]map[string]any, 0, 1000)
	for j := range cfg.Endpoints {
		batch = append(batch, wireInstance(newInstance(j, cfg.Services)))
		if len(batch) == cap(batch) || j == cfg.Endpoints-1 {
			b, _ := json.Marshal(map[string]any{"instances": batch})
			var r revisionAnswer
			if err := post(ctx, "POST", a+"/v1/instances", "application/json", b, &r); err != nil {
				return 0, err
			}
			bar.Add(int64(len(batch)))
			last, batch = max(last, r.Revision), batch[:0]
		}
	}
	bar.Finish()
	return last, nil
}

// waitPublished waits until server u's push engine has followed revision
// rev and published the scenario's clusters.
func waitPublished(ctx context.Context, u string, rev int64, clusters int) error {
	var st struct {
		Engine struct {
			Revision      int64          `json:"revision"`
			EndpointQueue int            `json:"endpoint_queue"`
			ConfigQueue   int            `json:"config_queue"`
			Resources     map[string]int `json:"resources"`
		} `json:"engine"`
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := post(ctx, "GET", u+"/v1/push/status", "", nil, &st)
		e := st.Engine
		if err == nil && e.Revision >= rev && e.EndpointQueue == 0 && e.ConfigQueue == 0 &&
			e.Resources["clusters"] == clusters && e.Resources["endpoints"] == clusters {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: server %s did not publish the scenario in 5 minutes (revision %d of %d, %v; %v)", u, e.Revision, rev, e.Resources, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RunServers runs the scenario against real servers in cluster mode and
// writes its ServersResult as one JSON object.
func RunServers(ctx context.Context, cfg ServersConfig, out io.Writer) (ServersResult, error) {
	if len(cfg.HTTP) == 0 || len(cfg.HTTP) != len(cfg.XDS) {
		return ServersResult{}, fmt.Errorf("bench: %d API and %d xDS addresses: want one of each per server", len(cfg.HTTP), len(cfg.XDS))
	}
	cfg.defaults()
	n := len(cfg.HTTP)
	res := ServersResult{
		Scenario: fmt.Sprintf("seed001_%d_services_%d_endpoints", cfg.Services, cfg.Endpoints), Protocol: "sotw",
		Servers: n, Services: cfg.Services, Clusters: cfg.Services * len(colors), Endpoints: cfg.Endpoints,
		Subscribers: cfg.Subscribers, LoadAvgStart: report.LoadAvgText(),
	}
	if cfg.Delta {
		res.Protocol = "delta"
	}
	start := time.Now()
	rev, err := loadServers(ctx, &cfg)
	if err != nil {
		return res, err
	}
	for _, u := range cfg.HTTP {
		if err := waitPublished(ctx, u, rev, res.Clusters); err != nil {
			return res, err
		}
	}
	res.LoadS = time.Since(start).Seconds()

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	want := [4]int{xds.TypeCluster: res.Clusters, xds.TypeEndpoint: res.Clusters, xds.TypeListener: 1, xds.TypeRoute: cfg.Services}
	tr := newTracker(cfg.Subscribers)
	groups := make([]int, cfg.Subscribers)
	for i := range groups {
		groups[i] = i % n
	}
	tr.group(groups, n)
	conns := make([]*grpc.ClientConn, 0, cfg.Subscribers)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	subs := make([]*subscriber, cfg.Subscribers)
	errs := make(chan error, cfg.Subscribers)
	bar := report.NewBar(cfg.Progress, "subscribers synced", int64(cfg.Subscribers))
	start = time.Now()
	for i := range subs {
		conn, err := dialSubscriber(cfg.XDS[groups[i]])
		if err != nil {
			return res, err
		}
		conns = append(conns, conn)
		s := &subscriber{id: i, delta: cfg.Delta, conn: conn, t: tr, synced: make(chan struct{})}
		subs[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(ctx, want); err != nil {
				errs <- fmt.Errorf("subscriber %d of server %s: %w", s.id, cfg.XDS[groups[s.id]], err)
			}
		}()
	}
	timeout := time.After(10 * time.Minute)
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

	// Churn: endpoint changes written to A at ChurnPerSec (up to
	// maxInFlight at once), and config changes every ConfigEvery.
	cpus := make([]report.ServerCPU, n)
	for i, u := range cfg.HTTP {
		cpus[i] = report.MetricsCPU(benchHTTP, u+"/metrics")
	}
	cpu0 := make([]float64, n)
	for i, f := range cpus {
		cpu0[i], _ = f(ctx)
	}
	bench0 := cpuSeconds()
	if cfg.Profile != nil {
		if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
			return res, fmt.Errorf("bench: profile: %w", err)
		}
		defer pprof.StopCPUProfile() // on an early return; a no-op after the one below
	}
	serverProf := make(chan error, 1)
	if cfg.ServerProfile != nil {
		wg.Add(1) // waited for after cancel: the caller closes the file
		go func() {
			defer wg.Done()
			serverProf <- fetchProfile(ctx, cfg.HTTP[0], cfg.Duration, cfg.ServerProfile)
		}()
	}
	var resp0 uint64
	for i, u := range cfg.HTTP {
		r, err := sentResponses(ctx, u)
		if err != nil {
			return res, fmt.Errorf("server %d: %w", i+1, err)
		}
		resp0 += r
	}
	// An instance comes back only once its down was answered a second ago
	// (pushed everywhere by then, at any latency this bench reports well).
	var downAt sync.Map   // instance index -> time its down was answered
	var inFlight sync.Map // instance index -> a write of it not yet answered
	ch := &churner{rng: rand.New(rand.NewPCG(1, 2)), services: cfg.Services, endpoints: cfg.Endpoints, down: map[int]bool{},
		settled: func(j int) bool {
			at, ok := downAt.Load(j)
			return ok && time.Since(at.(time.Time)) > time.Second
		},
		busy: func(j int) bool {
			_, ok := inFlight.Load(j)
			return ok
		}}
	// Open loop: a write every tick, up to maxInFlight at once, so that the
	// rate offered does not fall when A answers slowly (a tick finding
	// maxInFlight writes out is skipped and counted).
	const maxInFlight = 16
	var (
		wmu    sync.Mutex
		writes []time.Duration
		werr   error
		wwg    sync.WaitGroup
	)
	// failed keeps the first write error (the run's); called with wmu held.
	failed := func(err error) bool {
		if err != nil && werr == nil {
			werr = err
		}
		return err != nil
	}
	slots := make(chan struct{}, maxInFlight)
	write := func(j int, in *instance.Instance, up bool, name string, e *event, at time.Time) {
		defer wwg.Done()
		defer func() { <-slots }()
		defer inFlight.Delete(j)
		var r revisionAnswer
		var err error
		if up {
			b, _ := json.Marshal(wireInstance(in))
			err = post(ctx, "POST", cfg.HTTP[0]+"/v1/instances", "application/json", b, &r)
		} else {
			err = post(ctx, "DELETE", cfg.HTTP[0]+"/v1/instances/"+in.ID, "", nil, &r)
		}
		wmu.Lock()
		defer wmu.Unlock()
		if failed(err) {
			return
		}
		writes = append(writes, time.Since(at))
		tr.resolve(xds.TypeEndpoint, name, e, r.Revision)
		if up {
			downAt.Delete(j)
		} else {
			downAt.Store(j, time.Now())
		}
	}
	// Config changes: one write in flight at a time.
	var cfgTick <-chan time.Time
	if cfg.ConfigEvery > 0 {
		t := time.NewTicker(cfg.ConfigEvery)
		defer t.Stop()
		cfgTick = t.C
	}
	cfgBusy := make(chan struct{}, 1)
	writeConfig := func(typ xds.Type, name string, o *config.Object, e *event) {
		defer wwg.Done()
		defer func() { <-cfgBusy }()
		var r revisionAnswer
		err := post(ctx, "POST", cfg.HTTP[0]+"/v1/config:apply", "application/yaml", o.Encode(), &r)
		wmu.Lock()
		defer wmu.Unlock()
		if failed(err) {
			return
		}
		tr.resolve(typ, name, e, r.Revision)
	}
	tick := time.NewTicker(time.Second / time.Duration(cfg.ChurnPerSec))
	defer tick.Stop()
	// The rate is kept by the clock, not by the ticks received: a ticker
	// drops ticks while this goroutine waits for a core, and on a loaded
	// machine 100/s became 58/s. Each tick writes every change due by now.
	churnStart, due := time.Now(), 0
	end := time.After(cfg.Duration)
	cbar := report.NewTimeBar(ctx, cfg.Progress, "churn on A", cfg.Duration)
churn:
	for {
		select {
		case <-tick.C:
		case <-cfgTick:
			select {
			case cfgBusy <- struct{}{}:
			default:
				res.ConfigSkippedTicks++
				continue
			}
			typ, name, o := ch.nextConfig()
			e := tr.expectLater(1, typ, name, time.Now())
			wwg.Add(1)
			go writeConfig(typ, name, o, e)
			res.ConfigChanges++
			continue
		case <-end:
			break churn
		case err := <-errs:
			wwg.Wait()
			return res, err
		case <-ctx.Done():
			wwg.Wait()
			return res, ctx.Err()
		}
		now := int(time.Since(churnStart) * time.Duration(cfg.ChurnPerSec) / time.Second)
		for ; due < now; due++ {
			if cfg.ChurnOnlyDuringConfig && !tr.configPending() {
				continue
			}
			select {
			case slots <- struct{}{}:
			default:
				res.SkippedTicks++
				continue
			}
			j, in, up := ch.next()
			inFlight.Store(j, true)
			name := endpointSet(in)
			at := time.Now()
			e := tr.expectLater(0, xds.TypeEndpoint, name, at)
			wwg.Add(1)
			go write(j, in, up, name, e, at)
			res.EndpointChanges++
		}
	}
	wwg.Wait()
	if cfg.Profile != nil {
		pprof.StopCPUProfile()
	}
	if cfg.ServerProfile != nil {
		if err := <-serverProf; err != nil {
			return res, err
		}
	}
	if werr != nil {
		return res, werr
	}
	cbar.Finish()
	res.DurationS = cfg.Duration.Seconds()
	for deadline := time.Now().Add(5 * time.Second); tr.pending() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	res.BenchCPUSeconds = cpuSeconds() - bench0
	var resp1 uint64
	for i, f := range cpus {
		c, _ := f(ctx)
		res.ServerCPUSeconds = append(res.ServerCPUSeconds, report.Round3(c-cpu0[i]))
		r, _ := sentResponses(ctx, cfg.HTTP[i])
		resp1 += r
	}
	res.ResponsesPerSubPS = float64(resp1-resp0) / float64(cfg.Subscribers) / cfg.Duration.Seconds()
	tr.mu.Lock()
	res.Undelivered = tr.open
	res.EndpointAllP50MS, res.EndpointAllP99MS, res.EndpointAllMaxMS = ms(pct(tr.all[0], 0.5)), ms(pct(tr.all[0], 0.99)), ms(pct(tr.all[0], 1))
	res.EndpointEachP50MS, res.EndpointEachP99MS = ms(pct(tr.perSub[0], 0.5)), ms(pct(tr.perSub[0], 0.99))
	if cfg.ConfigEvery > 0 {
		res.EndpointDuringConfigChanges = len(tr.duringAll)
		res.EndpointDuringConfigAllP50MS, res.EndpointDuringConfigAllP99MS = ms(pct(tr.duringAll, 0.5)), ms(pct(tr.duringAll, 0.99))
		res.EndpointDuringConfigEachP99MS = ms(pct(tr.duringPerSub, 0.99))
		res.ConfigAllP50MS, res.ConfigAllP99MS = ms(pct(tr.all[1], 0.5)), ms(pct(tr.all[1], 0.99))
		res.ConfigEachP99MS = ms(pct(tr.perSub[1], 0.99))
		res.ConfigDRAllP50MS, res.ConfigDRAllP99MS = ms(pct(tr.drAll, 0.5)), ms(pct(tr.drAll, 0.99))
		res.ConfigVSAllP50MS, res.ConfigVSAllP99MS = ms(pct(tr.vsAll, 0.5)), ms(pct(tr.vsAll, 0.99))
	}
	for g := range n {
		res.PerServer = append(res.PerServer, ServerFigures{
			Server: strings.TrimPrefix(cfg.HTTP[g], "http://"), Subscribers: (cfg.Subscribers + n - 1 - g) / n,
			AllP50MS: ms(pct(tr.groupAll[g], 0.5)), AllP99MS: ms(pct(tr.groupAll[g], 0.99)), EachP99MS: ms(pct(tr.groupPerSub[g], 0.99)),
		})
	}
	tr.mu.Unlock()
	res.WriteP50MS, res.WriteP99MS = ms(pct(writes, 0.5)), ms(pct(writes, 0.99))
	res.LoadAvgEnd = report.LoadAvgText()
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return res, enc.Encode(res)
}

// fetchProfile writes server u's CPU profile over d (its /debug/pprof,
// served with --pprof) to w.
func fetchProfile(ctx context.Context, u string, d time.Duration, w io.Writer) error {
	secs := max(1, int(d/time.Second))
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", u, secs), nil)
	if err != nil {
		return fmt.Errorf("bench: server profile: %w", err)
	}
	resp, err := (&http.Client{Timeout: d + time.Minute}).Do(req)
	if err != nil {
		return fmt.Errorf("bench: server profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: server profile: %s from %s (is the server running with --pprof?)", resp.Status, u)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("bench: server profile: %w", err)
	}
	return nil
}

// sentResponses sums the responses server u has sent on its open streams
// (GET /v1/push/status).
func sentResponses(ctx context.Context, u string) (uint64, error) {
	var st struct {
		Subscribers []xds.SubscriberStatus `json:"subscribers"`
	}
	if err := post(ctx, "GET", u+"/v1/push/status", "", nil, &st); err != nil {
		return 0, err
	}
	var n uint64
	for _, s := range st.Subscribers {
		for _, t := range s.Types {
			n += t.Responses
		}
	}
	return n, nil
}
