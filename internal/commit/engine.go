// Package commit owns Sextant's write engine, which every record kind's
// writes go through: it plans each write request against the state it sees
// (a kind's Write implementations read through a Tx), groups concurrent
// requests into one durable store commit (group commit), pipelines the
// next batch while the last one is applied, and follows the store's stream
// of committed changes into the catalog, so that the catalog holds exactly
// what the store committed, whoever wrote it (cluster mode: other
// servers over one shared store). It knows no kind: the kinds (the
// instance kind in internal/registry, config, placement, acl) bring their
// tables, their writes and, where they keep state beside their table, a
// Tracker. Reads go straight to the catalog.
package commit

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

// Store is the durable store the engine writes through and follows.
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

// Tracker is a kind that keeps state beside its catalog table, which the
// catalog's changes move (the instance kind's TTL deadlines). Its methods
// are called one at a time, after the catalog has applied what they name:
// Loaded first on Open's goroutine, then on the follower goroutine. They
// must not block.
type Tracker interface {
	// Loaded is called after the catalog loaded the whole state (at Open,
	// and after a reload when the stream broke).
	Loaded()
	// Applied is called with each batch of committed changes once the
	// catalog holds them.
	Applied(changes []store.Change)
}

// ErrClosed is returned once the engine is closed.
var ErrClosed = errors.New("commit: closed")

// Options tune the engine; zero values are sensible defaults.
type Options struct {
	// Catalog tunes the in-memory catalog.
	Catalog catalog.Options
	// Tables are the catalog tables of every kind but System's.
	Tables map[store.Kind]catalog.Table
	// Trackers are told of every load and applied batch.
	Trackers []Tracker
	// Pipelined are the kinds whose writes may be answered without holding
	// the committer (pipeline.go): their appliers put Objects the catalog
	// adopts, and read no revision from a Pending record.
	Pipelined []store.Kind
	// Shared is set when other servers write the same store (a cluster):
	// writes are then conditional where they depend on what they read, and
	// decided again once the catalog caught up when they lose a race.
	Shared bool
	// MaxCommit caps the requests grouped into one commit (default 4096).
	MaxCommit int
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time
	// Logger receives the engine's logs (nil: discard).
	Logger *slog.Logger
	// Metrics, if set, receives the engine's metrics.
	Metrics prometheus.Registerer
	// Queued, if set, is called by Submit with each write once it waits in
	// the committer's queue, on the submitter's goroutine; it must not
	// block. Writes queued while a commit runs are planned in one batch:
	// tests use it to build a batch without sleeping.
	Queued func(Write)
	// IdleHanded, if set (tests), is called by the committer once it
	// handed a batch that wrote nothing to the answerer.
	IdleHanded func()
}

// Engine is the write path over a Store and the catalog it feeds.
//
// Goroutines, all owned by the engine and stopped by Close: the committer
// (plans and commits batches of requests), the answerer (answers pipelined
// batches once applied) and the follower (applies the store's stream to
// the catalog, the only writer of the catalog, and tells the Trackers).
type Engine struct {
	st        Store
	cat       *catalog.Catalog
	opts      Options
	log       *slog.Logger
	shared    bool
	pipelines [256]bool // by kind: Options.Pipelined

	reqs    chan *request
	stopped chan struct{} // closed when the committer stops taking requests
	cancel  context.CancelFunc
	wg      sync.WaitGroup

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
	// and its ops handed to the Trackers. Their memory is spare after it.
	tracked atomic.Int64
	answerq chan answers // to the answerer
	// handedSeq counts the batches handed to the answerer and handedRev is
	// the last one's revision (committer only); answeredSeq is the last
	// one answered (written by the answerer).
	handedSeq   int64
	handedRev   int64
	answeredSeq atomic.Int64

	noSpace bool // the last commit was refused for lack of space (committer only)
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

// Open loads the store into a new catalog with opts.Tables, tells the
// Trackers, and starts the committer, the answerer and the follower. Close
// stops them; the caller closes the store afterwards.
func Open(st Store, opts Options) (*Engine, error) {
	if opts.MaxCommit <= 0 {
		opts.MaxCommit = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		st: st, cat: catalog.New(opts.Catalog), opts: opts, log: opts.Logger, shared: opts.Shared,
		reqs: make(chan *request, 4096), stopped: make(chan struct{}), answerq: make(chan answers, maxInFlight),
		appliedCh: make(chan struct{}),
		commitSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sextant_registry_commit_requests", Help: "Write requests grouped into one durable commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sextant_registry_commit_seconds", Help: "Time of one store commit, fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	for _, k := range opts.Pipelined {
		e.pipelines[k] = true
	}
	for k, t := range opts.Tables {
		e.cat.Register(k, t)
	}
	start := time.Now()
	if err := e.cat.Load(st); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	e.loaded()
	feed, err := st.Follow(e.cat.Revision())
	if err != nil {
		return nil, fmt.Errorf("commit: follow the store: %w", err)
	}
	e.log.Info("catalog loaded", "revision", e.cat.Revision(), "took", time.Since(start))
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{
			e.commitSize, e.commitLatency,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_registry_watchers", Help: "Blocking queries now waiting."},
				func() float64 { return float64(e.cat.Waiters()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_registry_revision", Help: "Revision of the last applied change."},
				func() float64 { return float64(e.cat.Revision()) }),
		} {
			if err := opts.Metrics.Register(c); err != nil {
				feed.Close()
				return nil, fmt.Errorf("commit: register metrics: %w", err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(3)
	go func() { defer e.wg.Done(); e.followLoop(ctx, feed) }()
	go func() { defer e.wg.Done(); e.answerLoop(ctx) }()
	go func() { defer e.wg.Done(); defer close(e.answerq); e.commitLoop(ctx) }()
	return e, nil
}

// loaded tells the Trackers the catalog holds a whole new state.
func (e *Engine) loaded() {
	for _, t := range e.opts.Trackers {
		t.Loaded()
	}
	e.tracked.Store(e.cat.Revision())
}

// Catalog is the catalog the engine feeds, for reads.
func (e *Engine) Catalog() *catalog.Catalog { return e.cat }

// Shared reports whether other servers write the same store.
func (e *Engine) Shared() bool { return e.shared }

// Now is the engine's clock.
func (e *Engine) Now() time.Time { return e.opts.Now() }

// Queued is the number of requests waiting for the committer.
func (e *Engine) Queued() int { return len(e.reqs) }

// Tracked is the last revision the follower is done with: applied to the
// catalog and handed to the Trackers.
func (e *Engine) Tracked() int64 { return e.tracked.Load() }

// Close stops the committer, the answerer and the follower, failing writes
// still queued. In-flight HTTP requests should be drained first.
func (e *Engine) Close() error {
	e.cancel()
	e.wg.Wait()
	return nil
}

// Submit queues w and waits until it is committed and applied to the
// catalog (so the writer reads its own write), returning its revision: the
// commit's, or the one the write answered through Tx.Answer if it wrote
// nothing.
func (e *Engine) Submit(ctx context.Context, w Write) (int64, error) {
	req := &request{w: w, done: make(chan struct{})}
	select {
	case e.reqs <- req:
		if e.opts.Queued != nil {
			e.opts.Queued(w)
		}
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-e.stopped:
		return 0, ErrClosed
	}
	// Once queued, wait for the answer even if ctx ends: the write may be
	// committing and the caller must not report it lost.
	select {
	case <-req.done:
		return req.result()
	case <-e.stopped:
		select {
		case <-req.done: // answered before the committer stopped
			return req.result()
		default:
			return 0, ErrClosed
		}
	}
}
