// Package registry owns the registry's write path: it validates writes,
// groups concurrent requests into one durable commit (group commit), applies
// committed changes to the catalog in revision order, and turns instances
// unhealthy when their TTL lapses. Reads go straight to the catalog.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Store is the durable store the registry writes through. The registry
// calls it from one goroutine at a time.
type Store interface {
	// Commit writes txns atomically, txn i getting revision first+i, in the
	// store's order of commits; durable before it returns when sync is set.
	Commit(txns []store.Txn, sync bool) (first int64, err error)
	// Load calls fn for every stored record. Called once, before Commit.
	Load(fn func(store.Record) error) error
	// Revision is the revision of the last commit.
	Revision() int64
}

// ErrClosed is returned once the registry is closed.
var ErrClosed = errors.New("registry: closed")

// Options tune the registry; zero values are sensible defaults.
type Options struct {
	// Catalog tunes the in-memory catalog.
	Catalog catalog.Options
	// MaxCommit caps the requests grouped into one commit (default 4096).
	MaxCommit int
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time
	// Logger receives the registry's logs (nil: discard).
	Logger *slog.Logger
	// Metrics, if set, receives the registry's metrics.
	Metrics prometheus.Registerer
}

// Registry is the write path over a Store and the catalog it feeds.
type Registry struct {
	st   Store
	cat  *catalog.Catalog
	opts Options
	log  *slog.Logger

	reqs    chan *request
	stopped chan struct{} // closed when the committer stops taking requests
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	ttl     *ttlHeap

	commitSize    prometheus.Histogram
	commitLatency prometheus.Histogram
}

type reqKind uint8

const (
	kindRegister reqKind = iota
	kindDeregister
	kindHealth
)

// request is one write waiting for the committer.
type request struct {
	kind      reqKind
	instances []*catalog.Instance // register
	ids       []string            // deregister
	flips     []flip              // health
	done      chan struct{}

	// answer
	rev      int64
	notFound []string
	err      error
}

// flip asks to set one instance's health, if it is still the version seen.
type flip struct {
	inst    *catalog.Instance
	healthy bool
}

// Open loads the store into a new catalog and starts the committer and the
// TTL timer. Close stops them; the caller closes the store afterwards.
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
		st: st, cat: catalog.New(opts.Catalog), opts: opts, log: opts.Logger,
		reqs: make(chan *request, 4096), stopped: make(chan struct{}),
		ttl: newTTLHeap(),
		commitSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sextant_registry_commit_requests", Help: "Write requests grouped into one durable commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sextant_registry_commit_seconds", Help: "Time of one store commit, fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	start := time.Now()
	if err := r.load(); err != nil {
		return nil, err
	}
	r.log.Info("catalog loaded", "instances", r.cat.Len(), "revision", r.cat.Revision(), "took", time.Since(start))
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{
			r.commitSize, r.commitLatency,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_registry_instances", Help: "Registered instances."},
				func() float64 { return float64(r.cat.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_registry_watchers", Help: "Blocking queries now waiting."},
				func() float64 { return float64(r.cat.Waiters()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_registry_revision", Help: "Revision of the last applied change."},
				func() float64 { return float64(r.cat.Revision()) }),
		} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("registry: register metrics: %w", err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.commitLoop(ctx) }()
	go func() { defer r.wg.Done(); r.ttlLoop(ctx) }()
	return r, nil
}

// load fills the catalog from the store. Every instance starts healthy with
// a full 3 x TTL of grace. Records are copied in chunks as the store yields
// them and decoded on every core.
func (r *Registry) load() error {
	start := time.Now()
	type chunk struct {
		buf  []byte
		ends []int
		revs []int64
		ids  []string
		out  []*catalog.Instance
		err  error
	}
	const chunkRecords = 4096
	work := make(chan *chunk, 8)
	var chunks []*chunk
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				c.out = make([]*catalog.Instance, 0, len(c.ends))
				start := 0
				for i, end := range c.ends {
					in, err := catalog.DecodeInstance(c.buf[start:end], c.revs[i])
					if err != nil {
						c.err = fmt.Errorf("registry: load %q: %w", c.ids[i], err)
						break
					}
					c.out = append(c.out, in)
					start = end
				}
			}
		}()
	}
	newChunk := func(recSize int) *chunk {
		return &chunk{
			buf:  make([]byte, 0, chunkRecords*(recSize+recSize/4)),
			ends: make([]int, 0, chunkRecords), revs: make([]int64, 0, chunkRecords), ids: make([]string, 0, chunkRecords),
		}
	}
	var cur *chunk
	total := 0
	err := r.st.Load(func(rec store.Record) error {
		if cur == nil {
			cur = newChunk(len(rec.Value))
		}
		total++
		cur.buf = append(cur.buf, rec.Value...)
		cur.ends = append(cur.ends, len(cur.buf))
		cur.revs = append(cur.revs, rec.Revision)
		cur.ids = append(cur.ids, rec.ID)
		if len(cur.ends) == chunkRecords {
			chunks = append(chunks, cur)
			work <- cur
			cur = nil
		}
		return nil
	})
	if cur != nil {
		chunks = append(chunks, cur)
		work <- cur
	}
	close(work)
	wg.Wait()
	if err != nil {
		return err
	}
	insts := make([]*catalog.Instance, 0, total)
	for _, c := range chunks {
		if c.err != nil {
			return c.err
		}
		insts = append(insts, c.out...)
	}
	read := time.Since(start)
	now := r.opts.Now()
	for _, in := range insts {
		r.arm(in, now)
	}
	armed := time.Since(start)
	r.cat.Load(r.st.Revision(), insts)
	r.log.Debug("load phases", "read_decode", read, "ttl", armed-read, "catalog", time.Since(start)-armed)
	return nil
}

// Catalog is the catalog the registry feeds, for reads.
func (r *Registry) Catalog() *catalog.Catalog { return r.cat }

// Close stops the committer and the TTL timer, failing writes still queued.
// In-flight HTTP requests should be drained first.
func (r *Registry) Close() error {
	r.cancel()
	r.wg.Wait()
	return nil
}

// submit queues req and waits for its answer.
func (r *Registry) submit(ctx context.Context, req *request) error {
	req.done = make(chan struct{})
	select {
	case r.reqs <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopped:
		return ErrClosed
	}
	// Once queued, wait for the answer even if ctx ends: the write may be
	// committing and the caller must not report it lost.
	select {
	case <-req.done:
		return req.err
	case <-r.stopped:
		select {
		case <-req.done: // answered before the committer stopped
			return req.err
		default:
			return ErrClosed
		}
	}
}

// Register upserts instances (validated with Prepare) atomically and
// durably. It answers the request's revision (the instances' current
// revision if nothing changed).
func (r *Registry) Register(ctx context.Context, instances []*catalog.Instance) (int64, error) {
	if len(instances) == 0 || len(instances) > MaxBatch {
		return 0, fieldErr(-1, "instances", "%d instances, want 1..%d", len(instances), MaxBatch)
	}
	req := &request{kind: kindRegister, instances: instances}
	if err := r.submit(ctx, req); err != nil {
		return 0, err
	}
	return req.rev, nil
}

// Deregister deletes the instances with ids atomically and durably, and
// returns the ids it did not find.
func (r *Registry) Deregister(ctx context.Context, ids []string) (int64, []string, error) {
	if err := checkIDs(ids); err != nil {
		return 0, nil, err
	}
	req := &request{kind: kindDeregister, ids: ids}
	if err := r.submit(ctx, req); err != nil {
		return 0, nil, err
	}
	return req.rev, req.notFound, nil
}

// Heartbeat renews the TTL of the instances with ids and returns the ids it
// did not find. An unhealthy instance turns healthy, with a new revision.
// Heartbeats are not durable.
func (r *Registry) Heartbeat(ctx context.Context, ids []string) ([]string, error) {
	if err := checkIDs(ids); err != nil {
		return nil, err
	}
	now := r.opts.Now()
	var notFound []string
	var revive []flip
	for _, id := range ids {
		in := r.cat.Get(id)
		if in == nil {
			notFound = append(notFound, id)
			continue
		}
		if in.TTLSeconds > 0 {
			in.Live.Deadline.Store(now.Add(time.Duration(ttlGraceFactor*in.TTLSeconds) * time.Second).UnixNano())
		}
		if !in.Healthy {
			revive = append(revive, flip{inst: in, healthy: true})
		}
	}
	if len(revive) > 0 {
		if err := r.submit(ctx, &request{kind: kindHealth, flips: revive}); err != nil {
			return nil, err
		}
	}
	return notFound, nil
}

// arm starts the TTL clock of a new instance version: a fresh deadline, and
// a heap entry unless one already covers it.
func (r *Registry) arm(in *catalog.Instance, now time.Time) {
	if in.TTLSeconds == 0 {
		in.Live.Deadline.Store(0)
		return
	}
	d := now.Add(time.Duration(ttlGraceFactor*in.TTLSeconds) * time.Second).UnixNano()
	in.Live.Deadline.Store(d)
	r.ttl.push(in.ID, in.Live, d)
}
