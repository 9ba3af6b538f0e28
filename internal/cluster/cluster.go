// Package cluster is one server's membership in a cluster of Sextant
// servers over one shared store: its lease in the database, the view of
// the live servers, which of them judges each instance's TTL (rendezvous
// hashing over the live servers), the relay of heartbeats to that judge
// through the database, and how far this server's catalog is behind the
// store (readiness, follow lag, staleness).
//
// It owns no records and writes no health: the registry judges the
// instances this package says it owns and writes flips through the store
// like any change. Servers talk only through the database; none needs
// another's address.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backend is what the cluster keeps in the shared store (the MySQL store
// implements it). Called from the member's goroutine only, except
// Unreachable (any goroutine, non-blocking).
type Backend interface {
	// Renew extends this server's lease and returns the ids of the live
	// servers, sorted.
	Renew(ctx context.Context, id, addr string, started time.Time, lease time.Duration) ([]string, error)
	// Leave ends this server's lease at once.
	Leave(ctx context.Context, id string) error
	// Relay stores a batch of heartbeats for server owner.
	Relay(ctx context.Context, owner, sender string, beats []byte) error
	// Collect takes the batches relayed to owner.
	Collect(ctx context.Context, owner string) ([][]byte, error)
	// Sweep deletes what dead servers left behind, older than age.
	Sweep(ctx context.Context, age time.Duration) error
	// Head returns the store's newest revision and, if after is below it,
	// the commit time (unix ns) of revision after+1.
	Head(ctx context.Context, after int64) (head, nextCommitted int64, err error)
	// Unreachable is how long the store has not answered (0: it does).
	Unreachable() time.Duration
}

// Sink is the registry, as the member feeds it.
type Sink interface {
	// Beat records a heartbeat relayed from another server. Must not block.
	Beat(id string, at int64)
	// Revision is the revision the catalog has applied. Must not block.
	Revision() int64
}

// Options tune a member; zero values are sensible defaults.
type Options struct {
	// ID names this server in the cluster (default: Addr and a random
	// suffix, new at each start).
	ID string
	// Addr is where this server answers, for operators reading sx_member.
	Addr string
	// Lease is how long a server stays a member without renewing (default
	// 5s): a server that dies hands its instances over after at most this.
	Lease time.Duration
	// Renew is how often the lease is renewed and the membership read
	// (default 1s).
	Renew time.Duration
	// RelayEvery is how often heartbeats are relayed and collected
	// (default 200ms).
	RelayEvery time.Duration
	// Logger receives membership changes (nil: discard).
	Logger *slog.Logger
	// Metrics, if set, receives the cluster's metrics.
	Metrics prometheus.Registerer
}

// maxPending bounds the heartbeats waiting to be relayed (an unreachable
// store); beyond it new ones are dropped, and owners give grace anyway
// when the store comes back.
const maxPending = 1 << 20

// Member is this server's membership. Owns, Relay, Moved, Ready and Stale
// are safe from any goroutine; Run is the member's goroutine.
type Member struct {
	b       Backend
	opts    Options
	log     *slog.Logger
	started time.Time

	view  atomic.Pointer[view] // nil or empty: this server owns nothing
	moved chan struct{}        // capacity 1: a pending "ownership moved"

	mu      sync.Mutex
	pending map[string]map[string]int64 // owner -> instance id -> newest heartbeat
	npend   int

	sink      atomic.Pointer[sinkBox]
	firstHead atomic.Int64 // the store's head at the first probe (-1: not yet)
	ready     atomic.Bool

	members, lagRevs, lagSeconds, live prometheus.Gauge
	relayed, collected, moves          prometheus.Counter
}

type sinkBox struct{ s Sink }

// New returns a member of the cluster stored in b. It joins at Run.
func New(b Backend, opts Options) *Member {
	if opts.Lease <= 0 {
		opts.Lease = 5 * time.Second
	}
	if opts.Renew <= 0 {
		opts.Renew = time.Second
	}
	if opts.RelayEvery <= 0 {
		opts.RelayEvery = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ID == "" {
		var r [4]byte
		rand.Read(r[:])
		opts.ID = opts.Addr + "-" + hex.EncodeToString(r[:])
		if len(opts.ID) > 64 {
			opts.ID = opts.ID[len(opts.ID)-64:]
		}
	}
	m := &Member{b: b, opts: opts, log: opts.Logger, started: time.Now(), moved: make(chan struct{}, 1),
		pending: map[string]map[string]int64{}}
	m.firstHead.Store(-1)
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m.members = gauge("sextant_cluster_members", "Live servers of the cluster, as this one last read them.")
	m.live = gauge("sextant_cluster_live", "1 while this server holds a valid lease and judges its share of instances.")
	m.lagRevs = gauge("sextant_cluster_follow_lag_revisions", "Revisions the store holds that this server's catalog has not applied yet.")
	m.lagSeconds = gauge("sextant_cluster_follow_lag_seconds", "How long ago the oldest revision this server has not applied was committed.")
	m.relayed = counter("sextant_cluster_relayed_heartbeats_total", "Heartbeats received here and relayed to the server that judges the instance.")
	m.collected = counter("sextant_cluster_collected_heartbeats_total", "Heartbeats other servers relayed to this one.")
	m.moves = counter("sextant_cluster_ownership_moves_total", "Membership changes that moved instances between judges.")
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{m.members, m.live, m.lagRevs, m.lagSeconds, m.relayed, m.collected, m.moves} {
			opts.Metrics.MustRegister(c)
		}
	}
	return m
}

// ID is this server's id in the cluster.
func (m *Member) ID() string { return m.opts.ID }

// Owns reports whether this server judges instance id's TTL.
func (m *Member) Owns(id string) bool {
	v := m.view.Load()
	return v != nil && v.owner(id) == m.opts.ID
}

// Owner is the server that judges instance id ("" if this server does not
// hold a lease, so knows of none).
func (m *Member) Owner(id string) string { return m.view.Load().owner(id) }

// Members lists the live servers as last read ("" none while this server
// has no lease).
func (m *Member) Members() []string {
	if v := m.view.Load(); v != nil {
		return v.ids
	}
	return nil
}

// Relay queues a heartbeat of an instance another server judges; the
// member's goroutine sends the queue every RelayEvery.
func (m *Member) Relay(id string, at int64) {
	owner := m.view.Load().owner(id)
	if owner == "" || owner == m.opts.ID {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	beats := m.pending[owner]
	if beats == nil {
		beats = map[string]int64{}
		m.pending[owner] = beats
	}
	if prev, ok := beats[id]; ok {
		beats[id] = max(prev, at)
		return
	}
	if m.npend >= maxPending {
		return
	}
	beats[id] = at
	m.npend++
}

// Moved is signalled when ownership may have changed.
func (m *Member) Moved() <-chan struct{} { return m.moved }

// Ready reports whether the catalog has caught up with the store: it has
// applied the revision the store was at when this server first asked.
func (m *Member) Ready() bool {
	if m.ready.Load() {
		return true
	}
	sb, head := m.sink.Load(), m.firstHead.Load()
	if sb == nil || head < 0 || sb.s.Revision() < head {
		return false
	}
	m.ready.Store(true)
	return true
}

// Stale is how long the store has been out of reach (0: it answers).
func (m *Member) Stale() time.Duration { return m.b.Unreachable() }

// Run joins the cluster and keeps this server's lease, view, relays and
// lag until ctx ends; then it leaves (its lease ends at once, so the
// others take over its instances without waiting for it to expire).
func (m *Member) Run(ctx context.Context, sink Sink) {
	m.sink.Store(&sinkBox{sink})
	renew := time.NewTicker(m.opts.Renew)
	defer renew.Stop()
	relay := time.NewTicker(m.opts.RelayEvery)
	defer relay.Stop()
	var lastOK time.Time
	lastOK = m.renew(ctx, lastOK)
	m.probe(ctx, sink)
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			m.setView(nil, "leaving")
			lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := m.b.Leave(lctx, m.opts.ID); err != nil {
				m.log.Warn("leaving the cluster failed; the lease will expire", "err", err)
			}
			cancel()
			return
		case <-relay.C:
			m.flush(ctx)
			m.collect(ctx, sink)
		case <-renew.C:
			lastOK = m.renew(ctx, lastOK)
			m.probe(ctx, sink)
			if n%30 == 0 {
				if err := m.b.Sweep(ctx, 10*m.opts.Lease); err != nil && ctx.Err() == nil {
					m.log.Debug("sweeping the cluster tables failed", "err", err)
				}
			}
		}
	}
}

// renew extends the lease and reads the membership. Without a renewal for
// nearly a lease, this server stops judging anything: the others will take
// its instances over when its lease expires.
func (m *Member) renew(ctx context.Context, lastOK time.Time) time.Time {
	start := time.Now()
	ids, err := m.b.Renew(ctx, m.opts.ID, m.opts.Addr, m.started, m.opts.Lease)
	if err != nil {
		if ctx.Err() == nil && !lastOK.IsZero() && time.Since(lastOK) > m.opts.Lease-m.opts.Renew {
			m.setView(nil, "lease not renewed: "+err.Error())
		}
		return lastOK
	}
	v := newView(ids)
	if !v.has(m.opts.ID) {
		m.setView(nil, "this server is not among the live members")
		return start
	}
	m.setView(v, "")
	return start
}

func (m *Member) setView(v *view, why string) {
	old := m.view.Load()
	if old.equal(v) {
		return
	}
	m.view.Store(v)
	if v != nil {
		m.members.Set(float64(len(v.ids)))
		m.live.Set(1)
		m.log.Info("cluster membership", "self", m.opts.ID, "members", v.ids)
	} else {
		m.live.Set(0)
		m.log.Warn("not judging any instance", "self", m.opts.ID, "why", why)
	}
	m.moves.Inc()
	select {
	case m.moved <- struct{}{}:
	default:
	}
}

// flush relays the queued heartbeats, one batch per owner. A batch that
// cannot be stored goes back in the queue.
func (m *Member) flush(ctx context.Context) {
	m.mu.Lock()
	if m.npend == 0 {
		m.mu.Unlock()
		return
	}
	pending := m.pending
	m.pending, m.npend = map[string]map[string]int64{}, 0
	m.mu.Unlock()
	for owner, beats := range pending {
		if err := m.b.Relay(ctx, owner, m.opts.ID, appendBeats(nil, beats)); err != nil {
			if ctx.Err() == nil {
				m.log.Debug("relaying heartbeats failed; keeping them", "owner", owner, "err", err)
			}
			for id, at := range beats {
				m.Relay(id, at)
			}
			continue
		}
		m.relayed.Add(float64(len(beats)))
	}
}

// collect hands the heartbeats relayed to this server to the registry.
func (m *Member) collect(ctx context.Context, sink Sink) {
	if m.view.Load() == nil {
		return
	}
	batches, err := m.b.Collect(ctx, m.opts.ID)
	if err != nil {
		return
	}
	n := 0
	for _, b := range batches {
		if err := decodeBeats(b, func(id string, at int64) { sink.Beat(id, at); n++ }); err != nil {
			m.log.Warn("dropping a batch of relayed heartbeats", "err", err)
		}
	}
	m.collected.Add(float64(n))
}

// probe reads the store's head: readiness and the follow lag.
func (m *Member) probe(ctx context.Context, sink Sink) {
	applied := sink.Revision()
	head, next, err := m.b.Head(ctx, applied)
	if err != nil {
		return
	}
	m.firstHead.CompareAndSwap(-1, head)
	lag := max(head-applied, 0)
	m.lagRevs.Set(float64(lag))
	if lag > 0 && next > 0 {
		m.lagSeconds.Set(max(time.Since(time.Unix(0, next)).Seconds(), 0))
	} else {
		m.lagSeconds.Set(0)
	}
}
