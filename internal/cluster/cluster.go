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
// another's address (the store's commit announcements, which wake other
// servers' followers, find theirs in the database too).
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backend is what the cluster keeps in the shared store (the MySQL store
// implements it). Renew is called from the member's lease goroutine, the
// others from Run's goroutine, Unreachable from any goroutine
// (non-blocking); so calls may overlap.
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

// Member is this server's membership. Owns, Owner, Term, Members, Relay,
// Moved, Ready and Stale are safe from any goroutine; Run is the member's.
type Member struct {
	b       Backend
	opts    Options
	log     *slog.Logger
	started time.Time

	lease atomic.Pointer[lease] // nil: no lease yet, or left
	moved chan struct{}         // capacity 1: a pending "ownership moved"

	mu      sync.Mutex
	pending map[string]map[string]int64 // owner -> instance id -> newest heartbeat
	npend   int

	sink        atomic.Pointer[sinkBox]
	firstHead   atomic.Int64 // the store's head at the first probe (-1: not yet)
	collectedAt atomic.Int64 // start of the last collection that succeeded (unix ns)
	ready       atomic.Bool

	// The lease goroutine's own (Run's keepLease).
	terms   uint64 // terms given so far
	judging bool   // what the log, the live gauge and Moved last said

	members, lagRevs, lagSeconds, live prometheus.Gauge
	relayed, collected, moves          prometheus.Counter
}

// lease is this server's lease as of its last successful renewal.
// Immutable.
type lease struct {
	v      *view // the live servers, this one among them
	others *view // the same without this server: the judges once this lease may have lapsed
	// until is when this lease may end, by this server's monotonic clock:
	// the start of the renewal that gave it, plus the lease, minus a margin.
	// The database ended it no earlier, and the others take over only once
	// the database has ended it: from until on, this server judges nothing.
	until time.Time
	// term numbers the unbroken run of valid leases this one belongs to: it
	// changes when a renewal lands after the previous lease ended.
	term uint64
}

// valid reports whether l lets this server judge at now.
func (l *lease) valid(now time.Time) bool { return l != nil && now.Before(l.until) }

// judges is the view of who judges what at now: l's, or, once l may have
// lapsed, the others' (whom this server relays heartbeats to).
func (l *lease) judges(now time.Time) *view {
	switch {
	case l == nil:
		return nil
	case l.valid(now):
		return l.v
	}
	return l.others
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

// margin is how long before the database may end a lease this server stops
// judging under it: the clocks of this server and the database may run at
// slightly different rates, or step.
func (m *Member) margin() time.Duration { return m.opts.Lease / 10 }

// Owns reports whether this server judges instance id's TTL now: it holds a
// lease that cannot have ended yet, and id is its share.
func (m *Member) Owns(id string) bool { return m.Judge(id) != 0 }

// Judge is the term (see Term) in which this server judges instance id's
// TTL now, 0 if it does not.
func (m *Member) Judge(id string) uint64 {
	if l := m.lease.Load(); l.valid(time.Now()) && l.v.owner(id) == m.opts.ID {
		return l.term
	}
	return 0
}

// Term numbers this server's current unbroken run of leases (0: it judges
// nothing now). It changes whenever this server judges again after a time
// it may not have: whatever it owns then may have been judged, and sent
// heartbeats, elsewhere meanwhile.
func (m *Member) Term() uint64 {
	if l := m.lease.Load(); l.valid(time.Now()) {
		return l.term
	}
	return 0
}

// Owner is the server that judges instance id ("" if this server does not
// hold a lease, so knows of none).
func (m *Member) Owner(id string) string {
	if l := m.lease.Load(); l.valid(time.Now()) {
		return l.v.owner(id)
	}
	return ""
}

// Members lists the live servers as last read (none while this server has
// no lease).
func (m *Member) Members() []string {
	if l := m.lease.Load(); l.valid(time.Now()) {
		return l.v.ids
	}
	return nil
}

// Relay queues a heartbeat of an instance another server judges; the
// member's goroutine sends the queue every RelayEvery. While this server's
// lease may have lapsed, the heartbeat goes to the judge among the others,
// who take this server's instances over when its lease ends.
func (m *Member) Relay(id string, at int64) {
	owner := m.lease.Load().judges(time.Now()).owner(id)
	if owner == "" || owner == m.opts.ID {
		return
	}
	m.queue(owner, id, at)
}

func (m *Member) queue(owner, id string, at int64) {
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

// HeardUntil implements registry.Cluster. A heartbeat received elsewhere
// at h is relayed by its server's next flush, within RelayEvery, and
// stored within one more RelayEvery unless that server's database round
// trip is slower (then its lease is at risk too); a collection that
// started after that has handed it to the registry.
func (m *Member) HeardUntil() int64 {
	if c := m.collectedAt.Load(); c > 0 {
		return c - int64(2*m.opts.RelayEvery)
	}
	return 0
}

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
//
// The lease has a goroutine of its own, which Run owns and stops: no other
// round trip (a slow relay, collection, probe or sweep) delays a renewal.
// Whatever delays a renewal itself, Owns stops at the lease's end.
func (m *Member) Run(ctx context.Context, sink Sink) {
	m.sink.Store(&sinkBox{sink})
	lctx, stopLease := context.WithCancel(ctx)
	leaseDone := make(chan struct{})
	go func() { defer close(leaseDone); m.keepLease(lctx) }()
	m.housekeep(ctx, sink)
	stopLease()
	<-leaseDone
	m.lease.Store(nil)
	m.tell(false, "leaving")
	lvctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.b.Leave(lvctx, m.opts.ID); err != nil {
		m.log.Warn("leaving the cluster failed; the lease will expire", "err", err)
	}
}

// housekeep relays and collects heartbeats every RelayEvery, and probes
// the store's head (and sweeps, every 30th time) every Renew, until ctx
// ends.
func (m *Member) housekeep(ctx context.Context, sink Sink) {
	probe := time.NewTicker(m.opts.Renew)
	defer probe.Stop()
	relay := time.NewTicker(m.opts.RelayEvery)
	defer relay.Stop()
	m.probe(ctx, sink)
	for n := 1; ; {
		select {
		case <-ctx.Done():
			return
		case <-relay.C:
			m.flush(ctx)
			m.collect(ctx, sink)
		case <-probe.C:
			m.probe(ctx, sink)
			if n++; n%30 == 0 {
				if err := m.b.Sweep(ctx, 10*m.opts.Lease); err != nil && ctx.Err() == nil {
					m.log.Debug("sweeping the cluster tables failed", "err", err)
				}
			}
		}
	}
}

// keepLease renews the lease every Renew until ctx ends. The lease
// goroutine.
func (m *Member) keepLease(ctx context.Context) {
	t := time.NewTicker(m.opts.Renew)
	defer t.Stop()
	for {
		m.renew(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// renew extends the lease and reads the membership. A renewal waits at
// most until the current lease ends (at least one Renew interval): past
// that, trying again on another connection serves better than waiting on
// this one. The lease goroutine.
func (m *Member) renew(ctx context.Context) {
	old := m.lease.Load()
	start := time.Now()
	bound := m.opts.Renew
	if old != nil {
		bound = max(bound, old.until.Sub(start))
	}
	rctx, cancel := context.WithTimeout(ctx, bound)
	ids, err := m.b.Renew(rctx, m.opts.ID, m.opts.Addr, m.started, m.opts.Lease)
	cancel()
	end := time.Now()
	if err == nil && !slices.Contains(ids, m.opts.ID) {
		err = errors.New("cluster: this server is not among the live members")
	}
	if err != nil {
		if ctx.Err() == nil && !old.valid(end) {
			m.tell(false, "lease not renewed: "+err.Error())
		}
		return
	}
	l := &lease{v: newView(ids), until: start.Add(m.opts.Lease - m.margin())}
	l.others = newView(slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == m.opts.ID }))
	if old.valid(end) {
		l.term = old.term
	} else {
		m.terms++
		l.term = m.terms
	}
	m.lease.Store(l)
	m.members.Set(float64(len(l.v.ids)))
	switch {
	case !l.valid(end):
		m.tell(false, "the renewal took longer than the lease")
	case old == nil || l.term != old.term || !l.v.equal(old.v):
		m.tell(true, "")
	}
}

// tell logs, sets the live gauge and signals Moved when this server starts
// or stops judging, or judges a new share. The lease goroutine, or Run
// once it has stopped.
func (m *Member) tell(judging bool, why string) {
	if !judging && !m.judging {
		return
	}
	m.judging = judging
	if judging {
		m.live.Set(1)
		m.log.Info("cluster membership", "self", m.opts.ID, "members", m.lease.Load().v.ids)
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
				m.Relay(id, at) // to the judge as of now, which may have changed
			}
			continue
		}
		m.relayed.Add(float64(len(beats)))
	}
}

// collect hands the heartbeats relayed to this server to the registry.
// Collecting goes on while the lease may have lapsed: those heartbeats
// are as recent as any.
func (m *Member) collect(ctx context.Context, sink Sink) {
	if m.lease.Load() == nil {
		return
	}
	start := time.Now()
	batches, err := m.b.Collect(ctx, m.opts.ID)
	if err != nil {
		return
	}
	defer m.collectedAt.Store(start.UnixNano()) // once the batches are handed to sink
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
