// Package registry is the registry's load generator, "sextant bench
// registry": it drives a running "sextant server" over loopback HTTP with
// the scenarios of the registry issue (one file each: register, batch,
// heartbeat, query, changes, watch) and reports throughput and latency
// percentiles as one JSON object. The loader shares the machine with the
// server, so the hot paths send pre-encoded bodies patched in place (only
// the id digits change), reuse read buffers, and do no formatting per
// request. It owns the instances it registers, and removes them at the end;
// it owns nothing on the server besides.
package registry

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// Scenarios lists the scenarios in the order they run.
var Scenarios = []string{"register", "batch", "heartbeat", "query", "changes", "watch"}

// Config configures Run. Zero values take the defaults in brackets.
type Config struct {
	Server    string      // server URL [http://127.0.0.1:7400]; https with TLS
	Token     string      // ACL token sent as Authorization: Bearer [none]
	TLS       *tls.Config // for an https server (a CA, a client certificate) [system roots]
	Scenarios []string    // subset of Scenarios [all]
	Namespace string      // namespace of everything created [bench-<unix time>]

	Duration     time.Duration // length of each throughput scenario [10s]
	MaxInstances int           // cap on instances one throughput scenario registers [1,000,000]

	Conns      int // register: concurrent single-instance registers [256]
	BatchConns int // batch: concurrent requests [4]
	BatchSize  int // batch: instances per request [500]
	// UniqueMetadata gives every instance of register and batch metadata
	// of its own (meta-key16's value is digits of its connection and id);
	// by default a service's instances cycle through 500 sets, as the
	// replicas of a few deployments would.
	UniqueMetadata bool
	HeartbeatConns int  // heartbeat: concurrent requests [4]
	HeartbeatIDs   int  // heartbeat: ids per request [1000]
	HeartbeatPool  int  // heartbeat: instances heartbeated [100,000]
	QueryConns     int  // query: concurrent queries [64]
	QuerySize      int  // query: instances in the queried service [100]
	QueryGzip      bool // query: send Accept-Encoding: gzip (the answer is read, not inflated)
	ChangesTotal   int  // changes: instances the registry holds before [200,000]
	ChangesCount   int  // changes: changes fetched in one call [5,000]
	ChangesRounds  int  // changes: timed calls [50]
	WatchRounds    int  // watch: rounds [300]

	Keep     bool      // leave what was registered in place
	Progress io.Writer // progress bars (nil: none)
}

func (c *Config) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Server == "" {
		c.Server = "http://127.0.0.1:7400"
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = Scenarios
	}
	if c.Namespace == "" {
		c.Namespace = "bench-" + strconv.FormatInt(time.Now().Unix(), 10)
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	def(&c.MaxInstances, 1_000_000)
	def(&c.Conns, 256)
	def(&c.BatchConns, 4)
	def(&c.BatchSize, 500)
	def(&c.HeartbeatConns, 4)
	def(&c.HeartbeatIDs, 1000)
	def(&c.HeartbeatPool, 100_000)
	def(&c.QueryConns, 64)
	def(&c.QuerySize, 100)
	def(&c.ChangesTotal, 200_000)
	def(&c.ChangesCount, 5_000)
	def(&c.ChangesRounds, 50)
	def(&c.WatchRounds, 300)
}

// Result is the JSON object Run prints.
type Result struct {
	Server    string `json:"server"`
	Namespace string `json:"namespace"`
	Machine   struct {
		NumCPU     int    `json:"num_cpu"`
		GOMAXPROCS int    `json:"gomaxprocs"`
		Note       string `json:"note"`
	} `json:"machine"`
	Register  *Throughput `json:"register,omitempty"`
	Batch     *Throughput `json:"batch,omitempty"`
	Heartbeat *Throughput `json:"heartbeat,omitempty"`
	Query     *Throughput `json:"query,omitempty"`
	Changes   *Latency    `json:"changes,omitempty"`
	Watch     *Latency    `json:"watch,omitempty"`
	Cleanup   *Cleanup    `json:"cleanup,omitempty"`
}

// Throughput is the figure of a throughput scenario. Items are
// instances (register, batch), ids (heartbeat) or queries (query).
type Throughput struct {
	Unit        string  `json:"unit"`
	Conns       int     `json:"conns"`
	PerRequest  int     `json:"per_request"`
	Requests    int64   `json:"requests"`
	Items       int64   `json:"items"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"per_second"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Target      float64 `json:"target_per_second"`
	TargetP99Ms float64 `json:"target_p99_ms,omitempty"`
	report.CPU
	Note string `json:"note,omitempty"`
}

// Latency is the figure of a latency scenario.
type Latency struct {
	Rounds      int     `json:"rounds"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	TargetP99Ms float64 `json:"target_p99_ms"`
	report.CPU
	Note string `json:"note,omitempty"`
	// watch only: from sending the register instead of from its answer
	FromSendP50Ms float64 `json:"from_send_p50_ms,omitempty"`
	FromSendP99Ms float64 `json:"from_send_p99_ms,omitempty"`
	// changes only
	Preloaded       int   `json:"preloaded,omitempty"`
	RegistryHolds   int   `json:"registry_holds,omitempty"`
	ChangesReturned int   `json:"changes_returned,omitempty"`
	BodyBytes       int64 `json:"body_bytes,omitempty"`
}

// Cleanup says what was removed at the end.
type Cleanup struct {
	Deregistered int     `json:"deregistered"`
	Seconds      float64 `json:"seconds"`
	Kept         bool    `json:"kept,omitempty"`
}

// Run runs the selected scenarios against cfg.Server, writes one JSON
// object of figures to out, and deregisters what it created unless cfg.Keep.
func Run(ctx context.Context, cfg Config, out io.Writer) (Result, error) {
	cfg.defaults()
	for _, s := range cfg.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return Result{}, fmt.Errorf("bench: unknown registry scenario %q (have %v)", s, Scenarios)
		}
	}
	c, err := client.New(cfg.Server, client.WithUserAgent("sextant-bench/1"), client.WithToken(cfg.Token), client.WithTLSConfig(cfg.TLS))
	if err != nil {
		return Result{}, fmt.Errorf("bench: %w", err)
	}
	defer c.HTTPClient().CloseIdleConnections()
	if _, err := c.Namespaces(ctx); err != nil {
		return Result{}, fmt.Errorf("bench: server %s not answering: %w", cfg.Server, err)
	}
	u, err := url.Parse(c.BaseURL())
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return Result{}, fmt.Errorf("bench: server %q: want an http or https URL", cfg.Server)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	r := &run{cfg: cfg, c: c, addr: addr, host: u.Host, base: u.Path}
	if cfg.Token != "" {
		r.auth = "Authorization: Bearer " + cfg.Token + "\r\n"
	}
	if u.Scheme == "https" {
		r.tls = cfg.TLS
		if r.tls == nil {
			r.tls = &tls.Config{}
		}
		r.tls = r.tls.Clone()
		r.tls.ServerName = u.Hostname()
	}
	res := Result{Server: c.BaseURL(), Namespace: cfg.Namespace}
	res.Machine.NumCPU = runtime.NumCPU()
	res.Machine.GOMAXPROCS = runtime.GOMAXPROCS(0)
	res.Machine.Note = "load generator and server share this machine's cores; loopback HTTP/1.1"

	var runErr error
	for _, s := range cfg.Scenarios {
		var err error
		switch s {
		case "register":
			res.Register, err = r.register(ctx)
		case "batch":
			res.Batch, err = r.batch(ctx)
		case "heartbeat":
			res.Heartbeat, err = r.heartbeat(ctx)
		case "query":
			res.Query, err = r.query(ctx)
		case "changes":
			res.Changes, err = r.changes(ctx)
		case "watch":
			res.Watch, err = r.watch(ctx)
		}
		if err == nil {
			err = ctx.Err() // interrupted: the figures of s are partial
		}
		if err != nil {
			runErr = fmt.Errorf("bench: registry %s: %w", s, err)
			break
		}
	}
	// Clean up even after a failed or interrupted run, on a fresh context.
	if cfg.Keep {
		res.Cleanup = &Cleanup{Kept: true}
	} else {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		res.Cleanup, err = r.cleanup(cctx)
		cancel()
		if err != nil && runErr == nil {
			runErr = fmt.Errorf("bench: registry cleanup: %w", err)
		}
	}
	if err := report.Print(out, res); err != nil && runErr == nil {
		runErr = fmt.Errorf("bench: %w", err)
	}
	return res, runErr
}

// run is one run's state; only the scenario running touches it.
type run struct {
	cfg  Config
	c    *client.Client
	addr string      // host:port of the server
	host string      // its Host header
	base string      // path prefix of the server URL, usually empty
	auth string      // the Authorization header line, or ""
	tls  *tls.Config // for https, or nil
	// created lists id families: ids prefix+10 digits of 0..n-1, so that
	// cleanup need not keep a million id strings.
	mu      sync.Mutex
	created []*family
}

type family struct {
	prefix string
	n      atomic.Int64
}

func (r *run) family(prefix string) *family {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := &family{prefix: prefix}
	r.created = append(r.created, f)
	return f
}

func (r *run) caller() *caller {
	return &caller{addr: r.addr, host: r.host, auth: r.auth, tls: r.tls}
}

func (r *run) startCPU(ctx context.Context) report.CPUMeter {
	return report.StartCPU(ctx, r.serverCPU)
}

// serverCPU reads the server's process_cpu_seconds_total from its /metrics,
// with the run's token and TLS.
func (r *run) serverCPU(ctx context.Context) (float64, bool) {
	c := r.caller()
	defer c.close()
	if _, err := c.send(ctx, http.MethodGet, r.base+"/metrics", nil); err != nil {
		return 0, false
	}
	return report.ProcessCPUFromMetrics(bytes.NewReader(c.buf))
}

// cleanup deregisters every id family, 10000 ids per request.
func (r *run) cleanup(ctx context.Context) (*Cleanup, error) {
	start := time.Now()
	res := &Cleanup{}
	var total int64
	for _, f := range r.created {
		total += f.n.Load()
	}
	bar := report.NewBar(r.cfg.Progress, "cleanup", total)
	defer bar.Finish()
	ids := make([]string, 0, 10000)
	flush := func() error {
		if len(ids) == 0 {
			return nil
		}
		_, nf, err := r.c.Deregister(ctx, ids...)
		if err != nil {
			return err
		}
		res.Deregistered += len(ids) - len(nf)
		bar.Add(int64(len(ids)))
		ids = ids[:0]
		return nil
	}
	for _, f := range r.created {
		for k := range f.n.Load() {
			ids = append(ids, instanceID(f.prefix, k))
			if len(ids) == cap(ids) {
				if err := flush(); err != nil {
					return res, err
				}
			}
		}
	}
	err := flush()
	res.Seconds = report.Round3(time.Since(start).Seconds())
	return res, err
}
