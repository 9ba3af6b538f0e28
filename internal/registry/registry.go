// Package registry is the instance kind: the catalog table of instances
// (every service's instances, label-indexed), their writes (register,
// deregister, heartbeat, health), and their health, judged by TTL: the
// deadlines, the timer that expires them, and in cluster mode the share of
// instances this server judges. It writes through the write engine
// (internal/commit) like every other kind, and is wired beside them:
//
//	reg := registry.New(opts)                   // the table and the TTL state
//	tables[store.Instances] = reg.Table()
//	eng, err := commit.Open(st, commit.Options{Tables: tables, Trackers: []commit.Tracker{reg}, Pipelined: registry.Pipelined})
//	reg.Start(eng)                              // the TTL timer; Close stops it
//
// The record itself (its fields, validation, codecs) is internal/instance.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Instances is the instance table: each service's instances, label-indexed.
type Instances = catalog.Groups[*instance.Instance]

// Service is an immutable version of one service's instances.
type Service = catalog.Group[*instance.Instance]

// Snapshot is a consistent view of every service.
type Snapshot = catalog.Snapshot[*instance.Instance]

// Pipelined are the kinds the write engine may pipeline for the registry
// (commit.Options.Pipelined): instance writes read no revision from a
// record pending in the batch.
var Pipelined = []store.Kind{store.Instances}

// Options tune the registry; zero values are sensible defaults.
type Options struct {
	// DeregisterAfter is how long an instance with a TTL may stay
	// unhealthy (its TTL expired, no heartbeat since) before the server
	// deregisters it, for instances that set no delay of their own
	// (deregister_after_seconds); 0: never.
	DeregisterAfter time.Duration
	// KeepHealthAtLoad keeps the health each loaded instance's record says.
	// By default a load starts every instance healthy: a single server
	// judges health afresh after a restart, with a grace period; servers of
	// a cluster share the judgement and keep it.
	KeepHealthAtLoad bool
	// Cluster, for servers sharing one store, says which instances this
	// server judges (cluster.go); nil: this server judges them all. Set
	// KeepHealthAtLoad with it: servers share the judgement.
	Cluster Cluster
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time
	// Logger receives the registry's logs (nil: discard).
	Logger *slog.Logger
	// Metrics, if set, receives the registry's metrics.
	Metrics prometheus.Registerer

	// Engine tunes the write engine Open opens (not New).
	Engine commit.Options
}

// Registry is the instance kind over the write engine.
//
// Goroutines: the TTL timer, started by Start and stopped by Close. The
// TTL state is also moved by the engine's follower (Tracker) and by
// request goroutines (heartbeats). Lock order: the TTL heap's mutex is
// taken alone.
type Registry struct {
	opts    Options
	log     *slog.Logger
	cluster Cluster
	table   *Instances

	eng *commit.Engine   // set by Start
	cat *catalog.Catalog // the engine's
	own bool             // Open opened eng: Close closes it

	ttl  *ttlHeap
	live sync.Map // instance id -> *liveness, for instances with a TTL
	// checkTTL: instance id -> *checkDeadlines, for instances with ttl
	// checks (checks.go).
	checkTTL sync.Map

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ commit.Tracker = (*Registry)(nil)

// New returns the instance kind with an empty table, to register with the
// write engine (Table, and itself as a Tracker) before it opens.
func New(opts Options) *Registry {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{opts: opts, log: opts.Logger, cluster: opts.Cluster, ttl: newTTLHeap()}
	codec := catalog.Codec[*instance.Instance]{
		Decode: func(rec store.Record) (*instance.Instance, error) { return instance.Decode(rec.Value, rec.Revision) },
		Adopt: func(obj any, rev int64) (*instance.Instance, error) {
			in, ok := obj.(*instance.Instance)
			if !ok {
				return nil, fmt.Errorf("registry: instance record carries a %T", obj)
			}
			in.Revision = rev
			return in, nil
		},
	}
	if !opts.KeepHealthAtLoad {
		// The heartbeat is judged afresh; the checks' state is durable.
		codec.Loaded = func(in *instance.Instance) bool {
			changed, was := in.TTLExpired, in.Healthy
			in.TTLExpired = false
			in.SetHealthy()
			return changed || in.Healthy != was
		}
	}
	r.table = catalog.NewGroups(codec)
	return r
}

// Table is the instance table, the catalog table of store.Instances.
func (r *Registry) Table() catalog.Table { return r.table }

// Instances is the instance table, for reads.
func (r *Registry) Instances() *Instances { return r.table }

// Start takes the write engine the registry's table was registered with
// and starts the TTL timer. Close stops it.
func (r *Registry) Start(eng *commit.Engine) error {
	if eng.Shared() != (r.cluster != nil) {
		// Writes over a shared store are conditional and re-planned; TTL
		// judgement is shared through Cluster: one without the other
		// would judge, or write, as a single server among several.
		return fmt.Errorf("registry: the engine's store is shared (%v) but a cluster is set (%v): they must agree", eng.Shared(), r.cluster != nil)
	}
	r.eng, r.cat = eng, eng.Catalog()
	if r.opts.Metrics != nil {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_registry_instances", Help: "Registered instances."},
			func() float64 { return float64(r.table.Len()) })
		if err := r.opts.Metrics.Register(g); err != nil {
			return fmt.Errorf("registry: register metrics: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.ttlLoop(ctx) }()
	return nil
}

// Open is the write engine over st with the registry's table (and
// opts.Engine's tables) and the registry started on it, in one call: for
// tests and tools. Close closes both.
func Open(st commit.Store, opts Options) (*Registry, error) {
	r := New(opts)
	eo := opts.Engine
	eo.Tables = map[store.Kind]catalog.Table{store.Instances: r.Table()}
	for k, t := range opts.Engine.Tables {
		eo.Tables[k] = t
	}
	eo.Trackers = append([]commit.Tracker{r}, eo.Trackers...)
	eo.Pipelined = Pipelined
	eo.Shared = opts.Cluster != nil
	if eo.Now == nil {
		eo.Now = r.opts.Now
	}
	if eo.Logger == nil {
		eo.Logger = opts.Logger
	}
	if eo.Metrics == nil {
		eo.Metrics = opts.Metrics
	}
	eng, err := commit.Open(st, eo)
	if err != nil {
		return nil, err
	}
	r.own = true
	if err := r.Start(eng); err != nil {
		eng.Close()
		return nil, err
	}
	return r, nil
}

// Loaded implements commit.Tracker: every loaded instance with a TTL gets
// a fresh deadline.
func (r *Registry) Loaded() { r.armAll() }

// Applied implements commit.Tracker: the TTL state follows the changes.
func (r *Registry) Applied(changes []store.Change) { r.track(changes) }

// Engine is the write engine the registry writes through.
func (r *Registry) Engine() *commit.Engine { return r.eng }

// Close stops the TTL timer (and the engine, if Open opened it).
func (r *Registry) Close() error {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	if r.own {
		return r.eng.Close()
	}
	return nil
}

// errNotStarted is returned by writes before Start.
var errNotStarted = errors.New("registry: not started")

// submit is the engine's Submit.
func (r *Registry) submit(ctx context.Context, w commit.Write) (int64, error) {
	if r.eng == nil {
		return 0, errNotStarted
	}
	return r.eng.Submit(ctx, w)
}

// submitChecked is the engine's SubmitChecked.
func (r *Registry) submitChecked(ctx context.Context, w commit.Write) (int64, error) {
	if r.eng == nil {
		return 0, errNotStarted
	}
	return r.eng.SubmitChecked(ctx, w)
}

// Revision is the revision the catalog has applied (cluster.Sink).
func (r *Registry) Revision() int64 { return r.cat.Revision() }

// Catalog is the engine's catalog, for reads.
func (r *Registry) Catalog() *catalog.Catalog { return r.cat }
