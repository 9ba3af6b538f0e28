package push

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// Options tune the engine. Zero values are sensible defaults.
type Options struct {
	// Logger: nil discards.
	Logger *slog.Logger
	// Registerer receives the recomputation histograms; nil: not registered.
	Registerer prometheus.Registerer
	// Debounce is the config path's quiet period: after a config change the
	// engine waits until no other came for Debounce, but at most
	// DebounceMax after the first, and recomputes once for all of them.
	// Defaults 10ms and 100ms; a negative Debounce recomputes at once.
	// Endpoint changes are never debounced.
	Debounce    time.Duration
	DebounceMax time.Duration
	// ClusterGrace is how long a cluster no route names any more stays
	// published, so that clients switch routes before it goes (default
	// 1s; negative: removed with the round that stopped naming it).
	ClusterGrace time.Duration
	// ProxyPort is the port of the HTTP listener for proxies (default
	// DefaultProxyPort).
	ProxyPort uint32
	// ConfigWorkers is how many goroutines a config round builds and
	// encodes on (default GOMAXPROCS-1, at least 1): config work leaves a
	// core to endpoint work, yields between services and pauses while
	// endpoint work is queued.
	ConfigWorkers int
	// RootNamespace is the mesh's root namespace, whose security policies
	// apply mesh-wide; "": config.DefaultRootNamespace.
	RootNamespace string
}

// Engine keeps an xds.Cache current with a Source. Create it with New and
// run it with Run; it stops when Run's context ends.
type Engine struct {
	src   Source
	cache *xds.Cache
	opts  Options
	log   *slog.Logger
	m     *metrics

	seen atomic.Int64 // revision of the last change handed to the workers

	// handed is the revision up to which every change is in a path's queue
	// (set once a batch is queued whole; 0 until the first computation is
	// published); progress is closed and replaced when it or the config
	// path advances while WaitPublished has waiters (published.go).
	handed   atomic.Int64
	progress atomic.Pointer[chan struct{}]
	waiters  atomic.Int32

	ep  endpointQueue
	cfg configQueue

	// specs holds each service's clusters (*serviceSpec); the config
	// worker writes, the endpoint worker reads.
	specs sync.Map
	// selected lists the services whose ServiceEntry selects instances
	// (selected.go); the config worker writes, the follower reads.
	selected selectedIndex

	// servers are the server listeners proxyless gRPC servers asked for;
	// sec the security policies in force (the config worker stores it).
	servers servers
	sec     atomic.Pointer[config.Security]
	// secPending is the revision of the last security change the follower
	// handed on, secAt the one sec reflects; secWake is closed (and
	// replaced) whenever sec is stored. A new server listener waits for
	// secAt to reach secPending, so that a server starting right after an
	// apply is not first given the policies before it.
	secPending, secAt atomic.Int64
	secWake           atomic.Pointer[chan struct{}]

	slowConfig func() // tests: runs at the start of every config round
	slowBuild  func() // tests: runs before each service's build in a config round
	slowEP     func() // tests: runs before each service's endpoint recomputation by the endpoint worker

	stats engineStats
}

// New returns an engine that feeds cache from src.
func New(src Source, cache *xds.Cache, opts Options) *Engine {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Debounce == 0 {
		opts.Debounce = 10 * time.Millisecond
	}
	if opts.DebounceMax <= 0 {
		opts.DebounceMax = 100 * time.Millisecond
	}
	if opts.ClusterGrace == 0 {
		opts.ClusterGrace = time.Second
	}
	if opts.ProxyPort == 0 {
		opts.ProxyPort = DefaultProxyPort
	}
	if opts.ConfigWorkers <= 0 {
		opts.ConfigWorkers = max(1, runtime.GOMAXPROCS(0)-1)
	}
	e := &Engine{src: src, cache: cache, opts: opts, log: opts.Logger, m: newMetrics(opts.Registerer)}
	e.ep.init()
	e.ep.progress = e.advanced
	e.cfg.init()
	wake := make(chan struct{})
	e.secWake.Store(&wake)
	progress := make(chan struct{})
	e.progress.Store(&progress)
	cache.SetListenerFunc(e.listenerFor)
	// The proxy's listener is static: published before any subscriber can
	// connect, so that the listener type has a version from the start (an
	// on-demand listener sent before it would carry an empty one).
	if _, err := cache.Apply(xds.TypeListener, []xds.Resource{{
		Name: xds.ProxyName, Version: "1", Message: xds.HTTPListener(xds.ProxyName, opts.ProxyPort, xds.ProxyName),
	}}, nil, "1", time.Now()); err != nil {
		e.log.Error("push: publish the proxy listener", "error", err)
	}
	return e
}

// DefaultProxyPort is the port of the proxies' HTTP listener by default.
const DefaultProxyPort = 15001

// Run loads the source's snapshot, computes every resource (the full
// recomputation), then follows the source's changes until ctx ends. It owns
// three goroutines (the follower, which is Run's own, the endpoint worker
// and the config worker) and returns after all have stopped: nil when ctx
// ended, or the error that stopped it.
func (e *Engine) Run(ctx context.Context) error {
	snap, err := e.src.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("push: snapshot: %w", err)
	}
	cw := newConfigWorker(e)
	cw.reset(snap)
	cw.servers(configBatch{snap: &snap})
	start := time.Now()
	// The first round has the machine to itself (no endpoint worker runs
	// yet, no subscriber has anything): every core, so a restart is short.
	cw.workers = runtime.GOMAXPROCS(0)
	cw.round(ctx)
	cw.workers = e.opts.ConfigWorkers
	if ctx.Err() != nil {
		return nil // stopped during the first round
	}
	e.stats.fullConfig.Store(int64(time.Since(start)))
	e.m.recompute.WithLabelValues("full").Observe(time.Since(start).Seconds())
	start = time.Now()
	for _, s := range cw.services() {
		e.recomputeEndpoints(s, strconv.FormatInt(snap.Revision, 10), time.Time{})
	}
	e.stats.fullEndpoints.Store(int64(time.Since(start)))
	e.handed.Store(snap.Revision)
	e.advanced()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); e.endpointLoop(ctx) }()
	go func() { defer wg.Done(); cw.loop(ctx) }()
	err = e.follow(ctx, snap.Revision)
	cancel()
	wg.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
}

// Resync recomputes every cluster and route from a fresh snapshot of the
// source's config (the full recomputation); only what changed is pushed.
// The round's duration shows in Status().LastConfigRoundMS. Safe from any
// goroutine while Run runs.
func (e *Engine) Resync(ctx context.Context) error {
	snap, err := e.src.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("push: snapshot: %w", err)
	}
	e.cfg.reset(snap)
	return nil
}

// follow reads changes in order and hands them to the two paths without
// waiting for either.
func (e *Engine) follow(ctx context.Context, since int64) error {
	e.seen.Store(since)
	known := map[naming.ServiceKey]bool{}
	changes, err := e.src.Follow(ctx, since)
	if err != nil {
		return fmt.Errorf("push: follow: %w", err)
	}
	for {
		batch, err := changes.Next(ctx)
		if errors.Is(err, ErrCompacted) {
			e.log.Warn("push: fell behind the change log; starting again from a snapshot", "since", e.seen.Load())
			snap, serr := e.src.Snapshot(ctx)
			if serr != nil {
				return fmt.Errorf("push: snapshot: %w", serr)
			}
			e.seen.Store(snap.Revision)
			e.cfg.reset(snap)
			for _, s := range snap.Services {
				e.ep.mark(s, time.Now())
			}
			e.handed.Store(snap.Revision)
			e.advanced()
			if changes, err = e.src.Follow(ctx, snap.Revision); err != nil {
				return fmt.Errorf("push: follow: %w", err)
			}
			continue
		}
		if err != nil {
			return err
		}
		now := time.Now()
		for i := range batch {
			ch := &batch[i]
			origin := ch.Committed
			if origin.IsZero() {
				origin = now
			}
			e.seen.Store(ch.Revision)
			switch ch.Op {
			case InstanceUpsert, InstanceDelete:
				e.ep.mark(ch.Service, origin)
				e.markSelecting(ch.Service, origin)
				if e.servers.any.Load() && e.servers.watches(ch.Service) {
					e.cfg.workloadsChanged(ch.Service, origin)
				}
				if !known[ch.Service] {
					known[ch.Service] = true
					e.cfg.service(ch.Service, origin)
				}
			case ConfigUpsert, ConfigDelete:
				if config.IsSecurity(ch.ConfigKey.Kind) {
					e.secPending.Store(ch.Revision)
				}
				e.cfg.change(*ch, origin)
			}
		}
		e.stats.changes.Add(int64(len(batch)))
		if len(batch) > 0 {
			e.handed.Store(batch[len(batch)-1].Revision)
			e.advanced()
		}
	}
}

// version is the version resources computed now carry: the revision of the
// last change handed to the workers (they read a state at least that new).
func (e *Engine) version() string { return strconv.FormatInt(e.seen.Load(), 10) }

// listenerFor answers the listener a proxyless gRPC client asks for when it
// dials xds:///name (the name may carry a port): an api_listener routing
// with the named service's route configuration, resolved in the client's
// namespace.
func (e *Engine) listenerFor(name, ns string) (xds.Resource, bool) {
	if addr, ok := xds.ParseServerListener(name); ok {
		// A proxyless gRPC server's own listener. Built now from the
		// policies in force, and again by the config worker (which may
		// have published newer ones meanwhile), so that the listener a
		// subscriber keeps is never older than the policies.
		key := name + "\x00" + ns
		if _, _, ok := e.cache.Get(xds.TypeListener, key); ok {
			// Published: the cache keeps it (asked again at every request).
			return xds.Resource{Name: name, Key: key}, true
		}
		e.waitSecurity(maxSecurityWait)
		r := serverReq{name: name, ns: ns, addr: addr, at: time.Now()}
		res := e.serverListener(key, r, resolve(r, e.finder()), e.security(), nil)
		if e.servers.add(key, r) {
			e.cfg.workloadsChanged(naming.ServiceKey{}, time.Now())
		}
		return res, true
	}
	host := name
	if i := lastColon(host); i >= 0 {
		host = host[:i]
	}
	if ns == "" {
		ns = "default"
	}
	svc, err := config.ResolveHost(host, ns)
	if err != nil {
		return xds.Resource{}, false
	}
	return xds.Resource{
		Name: name, Key: name + "\x00" + ns, Version: "1", Hidden: true,
		Message: xds.APIListener(name, xds.RouteName(svc)),
	}, true
}

func lastColon(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		switch c := s[i]; {
		case c == ':':
			return i
		case c < '0' || c > '9':
			return -1
		}
	}
	return -1
}

type engineStats struct {
	changes       atomic.Int64
	fullConfig    atomic.Int64 // ns
	fullEndpoints atomic.Int64 // ns
	configRounds  atomic.Int64
	lastConfig    atomic.Int64 // ns
	endpointRuns  atomic.Int64
}
