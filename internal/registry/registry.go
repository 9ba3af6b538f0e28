// Package registry owns Sextant's write path for every record kind: it
// validates instance writes, plans each write request against the state it
// sees (one applier per kind, the Write interface), groups concurrent
// requests into one durable store commit (group commit), and follows the
// store's stream of committed changes into the catalog, so that the catalog
// holds exactly what the store committed, whoever wrote it. It also judges
// instance health: TTL deadlines and the timer that expires them are its
// own. Reads go straight to the catalog.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Store is the durable store the registry writes through and follows.
type Store interface {
	// Commit writes txns as one atomic batch in the store's commit order;
	// a txn whose checks fail gets a conflict in its Result and writes
	// nothing. Durable before it returns when sync is set. Called by the
	// committer goroutine only.
	Commit(txns []store.Txn, sync bool) ([]store.Result, error)
	// Load reads a consistent snapshot of kinds and returns its revision.
	// Called by the follower goroutine (and once by Open).
	Load(kinds []store.Kind, fn func(store.Record) error) (int64, error)
	// Follow yields every change committed after since, in order. Called
	// by the follower goroutine.
	Follow(since int64) (store.Feed, error)
}

// ErrClosed is returned once the registry is closed.
var ErrClosed = errors.New("registry: closed")

// Options tune the registry; zero values are sensible defaults.
type Options struct {
	// Catalog tunes the in-memory catalog.
	Catalog catalog.Options
	// Tables are the catalog tables of kinds other than instances.
	Tables map[store.Kind]catalog.Table
	// MaxCommit caps the requests grouped into one commit (default 4096).
	MaxCommit int
	// DeregisterAfter is how long an instance with a TTL may stay
	// unhealthy (its TTL expired, no heartbeat since) before the server
	// deregisters it, for instances that set no delay of their own
	// (deregister_after_seconds); 0: never.
	DeregisterAfter time.Duration
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time
	// Logger receives the registry's logs (nil: discard).
	Logger *slog.Logger
	// Metrics, if set, receives the registry's metrics.
	Metrics prometheus.Registerer
	// Cluster, for servers sharing one store, says which instances this
	// server judges (cluster.go); nil: this server judges them all. Set
	// Catalog.KeepHealthAtLoad with it: servers share the judgement.
	Cluster Cluster
	// Queued, if set, is called by Submit with each write once it waits in
	// the committer's queue, on the submitter's goroutine; it must not
	// block. Writes queued while a commit runs are planned in one batch:
	// tests use it to build a batch without sleeping.
	Queued func(Write)
}

// Registry is the write path over a Store and the catalog it feeds.
//
// Goroutines, all owned by the registry and stopped by Close: the committer
// (plans and commits batches of requests), the follower (applies the
// store's stream to the catalog, the only writer of the catalog) and the
// TTL timer. Lock order: the TTL heap's mutex is taken alone.
type Registry struct {
	st      Store
	cat     *catalog.Catalog
	opts    Options
	log     *slog.Logger
	cluster Cluster

	reqs    chan *request
	stopped chan struct{} // closed when the committer stops taking requests
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	ttl  *ttlHeap
	live sync.Map // instance id -> *liveness, for instances with a TTL

	// applied is signalled by the follower after each catalog update.
	appliedMu  sync.Mutex
	appliedCh  chan struct{}
	followErr  error  // set when the follower cannot go on
	followErrs uint64 // counts the follower's failures
	followDone bool

	commitSize    prometheus.Histogram
	commitLatency prometheus.Histogram

	inflight []*inflight // committed, not yet applied (committer only)
	spare    spares      // memory of applied batches (committer only)
	// tracked is the last revision the follower is done with: applied,
	// and its ops read for the TTL state. Their memory is spare after it.
	tracked atomic.Int64
	answerq chan answers // to the answerer
	// handedSeq counts the batches handed to the answerer and handedRev is
	// the last one's revision (committer only); answeredSeq is the last
	// one answered (written by the answerer).
	handedSeq   int64
	handedRev   int64
	answeredSeq atomic.Int64
	// idleHanded, if set (tests, before the first write), is called by the
	// committer once it handed a batch that wrote nothing to the answerer.
	idleHanded func()
}

// request is one write waiting for the committer.
type request struct {
	w    Write
	done chan struct{}

	// answer
	rev   int64
	later func() int64 // see Tx.AnswerLater
	err   error
}

// result is the request's answer, once done is closed.
func (req *request) result() (int64, error) {
	if req.err == nil && req.later != nil {
		return max(req.rev, req.later()), nil
	}
	return req.rev, req.err
}

// Open loads the store into a new catalog and starts the committer, the
// follower and the TTL timer. Close stops them; the caller closes the store
// afterwards.
func Open(st Store, opts Options) (*Registry, error) {
	if opts.MaxCommit <= 0 {
		opts.MaxCommit = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{
		st: st, cat: catalog.New(opts.Catalog), opts: opts, log: opts.Logger, cluster: opts.Cluster,
		reqs: make(chan *request, 4096), stopped: make(chan struct{}), answerq: make(chan answers, maxInFlight),
		ttl: newTTLHeap(), appliedCh: make(chan struct{}),
		commitSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sextant_registry_commit_requests", Help: "Write requests grouped into one durable commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sextant_registry_commit_seconds", Help: "Time of one store commit, fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	for k, t := range opts.Tables {
		r.cat.Register(k, t)
	}
	start := time.Now()
	if err := r.cat.Load(st); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r.armAll()
	r.tracked.Store(r.cat.Revision())
	feed, err := st.Follow(r.cat.Revision())
	if err != nil {
		return nil, fmt.Errorf("registry: follow the store: %w", err)
	}
	r.log.Info("catalog loaded", "instances", r.cat.Instances().Len(), "revision", r.cat.Revision(), "took", time.Since(start))
	if opts.Metrics != nil {
		inst := r.cat.Instances()
		for _, c := range []prometheus.Collector{
			r.commitSize, r.commitLatency,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_registry_instances", Help: "Registered instances."},
				func() float64 { return float64(inst.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_registry_watchers", Help: "Blocking queries now waiting."},
				func() float64 { return float64(r.cat.Waiters()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_registry_revision", Help: "Revision of the last applied change."},
				func() float64 { return float64(r.cat.Revision()) }),
		} {
			if err := opts.Metrics.Register(c); err != nil {
				feed.Close()
				return nil, fmt.Errorf("registry: register metrics: %w", err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(4)
	go func() { defer r.wg.Done(); r.followLoop(ctx, feed) }()
	go func() { defer r.wg.Done(); r.answerLoop(ctx) }()
	go func() { defer r.wg.Done(); defer close(r.answerq); r.commitLoop(ctx) }()
	go func() { defer r.wg.Done(); r.ttlLoop(ctx) }()
	return r, nil
}

// Catalog is the catalog the registry feeds, for reads.
func (r *Registry) Catalog() *catalog.Catalog { return r.cat }

// Close stops the committer, the follower and the TTL timer, failing writes
// still queued. In-flight HTTP requests should be drained first.
func (r *Registry) Close() error {
	r.cancel()
	r.wg.Wait()
	return nil
}

// Submit queues w and waits until it is committed and applied to the
// catalog (so the writer reads its own write), returning its revision: the
// commit's, or the one the write answered through Tx.Answer if it wrote
// nothing.
func (r *Registry) Submit(ctx context.Context, w Write) (int64, error) {
	req := &request{w: w, done: make(chan struct{})}
	select {
	case r.reqs <- req:
		if r.opts.Queued != nil {
			r.opts.Queued(w)
		}
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-r.stopped:
		return 0, ErrClosed
	}
	// Once queued, wait for the answer even if ctx ends: the write may be
	// committing and the caller must not report it lost.
	select {
	case <-req.done:
		return req.result()
	case <-r.stopped:
		select {
		case <-req.done: // answered before the committer stopped
			return req.result()
		default:
			return 0, ErrClosed
		}
	}
}
