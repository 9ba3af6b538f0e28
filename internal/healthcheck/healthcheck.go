// Package healthcheck runs the active health checks of registered
// instances (instance.Check): it schedules every check this server judges
// (in a cluster, the server that judges the instance's TTL: exactly one),
// probes its target through internal/probe with a bounded pool of
// workers, applies Consul's thresholds, expires ttl checks, and writes a
// check's status through the registry (Registry.SetCheck) only when it
// changes, never once per probe. It deregisters an instance whose check
// stayed critical past its deregister_critical_service_after. It owns no
// durable state: the checks and their status are the instance records'.
//
// Wiring: New before the write engine opens (the runner is a
// commit.Tracker: the follower tells it which instances changed), Run
// once the registry has started; Run returns when its context ends.
package healthcheck

import (
	"container/heap"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/probe"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Registry is what the runner needs of the instance kind
// (*registry.Registry).
type Registry interface {
	// Instances is the instance table, read from the runner's goroutines.
	Instances() *registry.Instances
	// SetCheck writes a check's status; called from workers, blocks until
	// the write is applied.
	SetCheck(ctx context.Context, instanceID, checkID, status, output string) (int64, error)
	// RemoveIfUnchanged deregisters an instance version; workers, blocks.
	RemoveIfUnchanged(ctx context.Context, in *instance.Instance) (bool, error)
	// Judges reports whether this server judges an instance (its term, 0:
	// no); any goroutine, never blocks.
	Judges(id string) uint64
	// TTLDeadline and GraceTTL are a ttl check's deadline and its renewal
	// for a server that has just gained it; any goroutine, never block.
	TTLDeadline(id string, c *instance.Check) time.Time
	GraceTTL(id string, c *instance.Check)
}

var _ Registry = (*registry.Registry)(nil)

// Options tune the runner; zero values are sensible defaults.
type Options struct {
	// Workers bounds the probes in flight (default 64): a slow target
	// holds one worker for at most its check's timeout.
	Workers int
	// FirstWithin spreads the first probe of a new check over this long
	// (capped by its interval; default 2s), so that a batch registered at
	// once is not probed at once.
	FirstWithin time.Duration
	// Logger receives the runner's logs (nil: discard).
	Logger *slog.Logger
	// Metrics, if set, receives the runner's metrics.
	Metrics prometheus.Registerer
	// Prober runs the probes (default probe.New(), closed by Run).
	Prober *probe.Prober
}

// Runner runs the checks. Goroutines: Run's scheduler, which owns the
// tasks and their heap, and its workers, each holding one task at a time
// (its counters are then the worker's) and handing it back through
// returned, under mu. The follower only notes changed instance ids, under
// mu.
type Runner struct {
	reg    Registry
	opts   Options
	log    *slog.Logger
	prober *probe.Prober
	m      metrics

	mu      sync.Mutex
	changed map[string]struct{} // instance ids changed since the scheduler last looked
	rescan  bool                // the catalog (re)loaded: look at every instance
	wake    chan struct{}
	// returned are the tasks workers finished, for the scheduler to take
	// back (takeBack).
	returned []*task

	// The scheduler's.
	tasks map[string][]*task // instance id -> its checks' tasks
	queue taskHeap
	inRun int // tasks with workers
}

var _ commit.Tracker = (*Runner)(nil)

// task is one check of one instance, as scheduled.
type task struct {
	id    string         // the instance's
	check instance.Check // its definition (the state is read from the table)
	due   time.Time
	gone  bool // replaced or deleted: dropped when it next comes up
	inRun bool // with a worker
	// The worker's while inRun, the scheduler's otherwise: consecutive
	// results, and the judging term they were counted in.
	successes, failures int
	term                uint64
	seen                bool      // dispatched before: a new term is a regained judgement
	next                time.Time // set by the worker: when to run again
}

// New returns a runner over reg, to register as a commit.Tracker.
func New(reg Registry, opts Options) *Runner {
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	if opts.FirstWithin <= 0 {
		opts.FirstWithin = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Prober == nil {
		opts.Prober = probe.New()
	}
	return &Runner{reg: reg, opts: opts, log: opts.Logger, prober: opts.Prober, m: newMetrics(opts.Metrics),
		changed: map[string]struct{}{}, rescan: true, wake: make(chan struct{}, 1), tasks: map[string][]*task{}}
}

// Loaded implements commit.Tracker: every instance is looked at again.
func (r *Runner) Loaded() {
	r.mu.Lock()
	r.rescan = true
	r.mu.Unlock()
	r.signal()
}

// Applied implements commit.Tracker: the changed instances are looked at.
// Follower goroutine; does not block.
func (r *Runner) Applied(changes []store.Change) {
	r.mu.Lock()
	n := 0
	for _, sc := range changes {
		for _, op := range sc.Ops {
			if op.Kind != store.Instances {
				continue
			}
			if in, ok := op.Object.(*instance.Instance); ok && op.Absent && len(in.Checks) == 0 {
				continue // new, without checks: nothing to run or stop
			}
			r.changed[op.Key] = struct{}{}
			n++
		}
	}
	r.mu.Unlock()
	if n > 0 {
		r.signal()
	}
}

func (r *Runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run schedules and runs the checks until ctx ends, then waits for its
// workers' probes (cut short by ctx) and closes the prober.
func (r *Runner) Run(ctx context.Context) error {
	jobs := make(chan *task, r.opts.Workers)
	var wg sync.WaitGroup
	for range r.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range jobs {
				r.run(ctx, t)
				r.mu.Lock()
				r.returned = append(r.returned, t)
				r.mu.Unlock()
			}
		}()
	}
	defer func() {
		close(jobs)
		wg.Wait()
		r.prober.Close()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	for {
		now := time.Now()
		r.refresh(now)
		r.takeBack()
		r.dispatch(now, jobs)
		// Wake for the next due check, but batched: at most every
		// minWake (thousands of checks a second cost a wake-up each
		// otherwise), and while checks are with workers at least every
		// maxWake to take them back (a worker never wakes the scheduler).
		wait := time.Hour
		if len(r.queue) > 0 {
			wait = time.Until(r.queue[0].due)
		}
		if r.inRun > 0 {
			wait = min(wait, maxWake)
		}
		wait = max(wait, minWake-time.Since(now), time.Millisecond)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-timer.C:
		case now := <-sweep.C:
			r.prober.Sweep(now)
		}
	}
}

// The scheduler's wake-ups: at most one per minWake, at least one per
// maxWake while checks are with workers.
const (
	minWake = 20 * time.Millisecond
	maxWake = 250 * time.Millisecond
)

// takeBack requeues the tasks workers finished.
func (r *Runner) takeBack() {
	r.mu.Lock()
	back := r.returned
	r.returned = nil
	r.mu.Unlock()
	for _, t := range back {
		r.finished(t)
	}
	r.inRun -= len(back)
}

// refresh brings the tasks in line with the instances that changed.
func (r *Runner) refresh(now time.Time) {
	r.mu.Lock()
	rescan, changed := r.rescan, r.changed
	if !rescan && len(changed) == 0 {
		r.mu.Unlock()
		return
	}
	r.rescan, r.changed = false, map[string]struct{}{}
	r.mu.Unlock()
	table := r.reg.Instances()
	if rescan {
		seen := map[string]bool{}
		for _, svc := range table.Snapshot().Groups("") {
			for _, in := range svc.Items() {
				if len(in.Checks) > 0 {
					seen[in.ID] = true
					r.sync(in.ID, in, now)
				}
			}
		}
		for id := range r.tasks {
			if !seen[id] {
				r.sync(id, nil, now)
			}
		}
	}
	for id := range changed {
		r.sync(id, table.Get(id), now)
	}
	r.m.checks.Set(float64(r.count()))
}

func (r *Runner) count() int {
	n := 0
	for _, ts := range r.tasks {
		n += len(ts)
	}
	return n
}

// sync makes instance id's tasks those of in's checks (in nil: none),
// keeping the task (and its counters) of every unchanged check.
func (r *Runner) sync(id string, in *instance.Instance, now time.Time) {
	old := r.tasks[id]
	var kept []*task
	if in != nil {
		for i := range in.Checks {
			c := &in.Checks[i]
			var t *task
			for _, o := range old {
				if !o.gone && o.check.SameDefinition(c) {
					t = o
					break
				}
			}
			if t == nil {
				t = &task{id: id, check: *c, due: r.first(id, c, now)}
				heap.Push(&r.queue, t)
			}
			kept = append(kept, t)
		}
	}
	for _, o := range old {
		if !containsTask(kept, o) {
			o.gone = true
		}
	}
	if len(kept) == 0 {
		delete(r.tasks, id)
	} else {
		r.tasks[id] = kept
	}
}

func containsTask(ts []*task, t *task) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// first is when a new check first runs: a ttl check at its deadline, a
// probe at a random time within FirstWithin (or its interval).
func (r *Runner) first(id string, c *instance.Check, now time.Time) time.Time {
	if c.Type == instance.CheckTTL {
		return r.reg.TTLDeadline(id, c)
	}
	return now.Add(rand.N(min(r.opts.FirstWithin, c.Interval)))
}

// dispatch hands the tasks due to free workers; a task no worker can take
// now waits a little, and counts as deferred (all workers busy).
func (r *Runner) dispatch(now time.Time, jobs chan<- *task) {
	for len(r.queue) > 0 && !r.queue[0].due.After(now) {
		t := heap.Pop(&r.queue).(*task)
		if t.gone {
			continue
		}
		term := r.reg.Judges(t.id)
		seen := t.seen
		t.seen = true
		if term == 0 {
			// Another server judges it: look again a period later (its
			// judgement may move here when that server dies).
			t.term, t.successes, t.failures = 0, 0, 0
			t.due = now.Add(period(&t.check))
			heap.Push(&r.queue, t)
			continue
		}
		if term != t.term {
			// Judged here afresh: counters start again, a ttl gets its
			// grace period (updates may have gone to the former judge).
			// A check this server has just seen already got a full TTL
			// (first).
			t.term, t.successes, t.failures = term, 0, 0
			if seen && t.check.Type == instance.CheckTTL {
				r.reg.GraceTTL(t.id, &t.check)
			}
		}
		select {
		case jobs <- t:
			t.inRun = true
			r.inRun++
		default:
			r.m.deferred.Inc()
			t.due = now.Add(min(period(&t.check)/4, 250*time.Millisecond))
			heap.Push(&r.queue, t)
			return
		}
	}
}

// period is how often a check runs at most.
func period(c *instance.Check) time.Duration {
	if c.Type == instance.CheckTTL {
		return c.TTL
	}
	return c.Interval
}

// finished takes a task back from a worker.
func (r *Runner) finished(t *task) {
	t.inRun = false
	if t.gone {
		return
	}
	t.due = t.next
	heap.Push(&r.queue, t)
}

// run runs task t once on a worker and sets when it runs next.
func (r *Runner) run(ctx context.Context, t *task) {
	start := time.Now()
	in := r.reg.Instances().Get(t.id)
	var cur *instance.Check
	if in != nil {
		cur = in.Check(t.check.ID)
	}
	if cur == nil || !cur.SameDefinition(&t.check) {
		t.next = start.Add(period(&t.check)) // changed: the scheduler hears of it
		return
	}
	if d := cur.DeregisterCriticalServiceAfter; d > 0 && cur.Status == instance.StatusCritical && start.Sub(cur.ChangedAt) >= d {
		removed, err := r.reg.RemoveIfUnchanged(ctx, in)
		if err != nil && ctx.Err() == nil {
			r.log.Info("removal of an instance critical past its deregister_critical_service_after not committed; trying again", "instance", t.id, "check", cur.ID, "err", err)
		} else if removed {
			r.m.deregistered.Inc()
			r.log.Info("deregistered an instance critical past its deregister_critical_service_after", "instance", t.id, "check", cur.ID, "critical_since", cur.ChangedAt)
		}
		t.next = start.Add(min(period(cur), time.Second))
		return
	}
	if cur.Type == instance.CheckTTL {
		r.runTTL(ctx, t, in, cur, start)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, cur.Timeout)
	res := r.probe(pctx, in, cur)
	cancel()
	if ctx.Err() != nil {
		return // stopping: the result may be the cancellation's
	}
	r.m.result(cur.Type, res.Status.String()).Inc()
	want := ""
	if res.Status == probe.Passing {
		t.successes, t.failures = t.successes+1, 0
		if cur.Status != instance.StatusPassing && t.successes >= max(1, cur.SuccessBeforePassing) {
			want = instance.StatusPassing
		}
	} else {
		t.failures, t.successes = t.failures+1, 0
		if cur.Status != res.Status.String() && t.failures >= max(1, cur.FailuresBeforeCritical) {
			want = res.Status.String()
		}
	}
	if want != "" {
		r.write(ctx, t.id, cur.ID, want, res.Output)
	}
	// Every round lands within +-5% of the interval: a batch registered
	// at once spreads out over the rounds.
	iv := cur.Interval
	t.next = start.Add(iv - iv/20 + rand.N(iv/10+1))
	if t.next.Before(time.Now()) {
		t.next = time.Now()
	}
	if d := cur.DeregisterCriticalServiceAfter; d > 0 && want == instance.StatusCritical && d < iv {
		t.next = start.Add(d) // removed on time, not an interval late
	}
}

// runTTL turns a ttl check critical once its deadline passed.
func (r *Runner) runTTL(ctx context.Context, t *task, in *instance.Instance, cur *instance.Check, now time.Time) {
	deadline := r.reg.TTLDeadline(t.id, cur)
	if deadline.After(now) {
		t.next = deadline
		return
	}
	if cur.Status != instance.StatusCritical {
		r.write(ctx, t.id, cur.ID, instance.StatusCritical, "TTL expired: no update within "+cur.TTL.String())
		r.m.result(cur.Type, instance.StatusCritical).Inc()
	}
	t.next = now.Add(cur.TTL)
	if d := cur.DeregisterCriticalServiceAfter; d > 0 && d < cur.TTL {
		t.next = now.Add(d)
	}
}

func (r *Runner) probe(ctx context.Context, in *instance.Instance, c *instance.Check) probe.Result {
	switch c.Type {
	case instance.CheckHTTP:
		return r.prober.HTTP(ctx, probe.HTTP{URL: c.Target, Method: c.Method, Header: c.Header, TLSSkipVerify: c.TLSSkipVerify})
	case instance.CheckTCP:
		return r.prober.TCP(ctx, c.Target)
	case instance.CheckGRPC:
		return r.prober.GRPC(ctx, c.Target, c.GRPCService, false)
	}
	return probe.Result{Status: probe.Critical, Output: "unknown check type " + c.Type}
}

// write sets a check's status: a failure is logged and the check, still
// differing, is written again after its next result.
func (r *Runner) write(ctx context.Context, id, check, status, output string) {
	if _, err := r.reg.SetCheck(ctx, id, check, status, output); err != nil {
		if ctx.Err() == nil {
			r.log.Info("check status not written; trying again after the next result", "instance", id, "check", check, "status", status, "err", err)
		}
		return
	}
	r.m.writes.WithLabelValues(status).Inc()
	r.log.Debug("check status changed", "instance", id, "check", check, "status", status)
}

// taskHeap orders tasks by due time.
type taskHeap []*task

func (h taskHeap) Len() int           { return len(h) }
func (h taskHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h taskHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *taskHeap) Push(x any)        { *h = append(*h, x.(*task)) }
func (h *taskHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}

type metrics struct {
	checks       prometheus.Gauge
	probes       *prometheus.CounterVec
	results      map[[2]string]prometheus.Counter // probes' children, resolved once
	writes       *prometheus.CounterVec
	deferred     prometheus.Counter
	deregistered prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		checks: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sextant_health_checks", Help: "Active health checks this server schedules (it probes those it judges)."}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_health_check_results_total", Help: "Health check results (probes, and ttl expiries), by check type and result."},
			[]string{"type", "status"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_health_check_writes_total", Help: "Check status changes written, by new status."},
			[]string{"status"}),
		deferred:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sextant_health_check_deferred_total", Help: "Checks due while every worker was busy, run a little later (raise --check-workers if it grows)."}),
		deregistered: prometheus.NewCounter(prometheus.CounterOpts{Name: "sextant_health_check_deregistered_total", Help: "Instances deregistered after a check stayed critical past its deregister_critical_service_after."}),
	}
	if reg != nil {
		reg.MustRegister(m.checks, m.probes, m.writes, m.deferred, m.deregistered)
	}
	m.results = map[[2]string]prometheus.Counter{}
	for _, t := range []string{instance.CheckHTTP, instance.CheckTCP, instance.CheckGRPC, instance.CheckTTL} {
		for _, st := range []string{instance.StatusPassing, instance.StatusWarning, instance.StatusCritical} {
			m.results[[2]string{t, st}] = m.probes.WithLabelValues(t, st)
		}
	}
	return m
}

// result is the counter of results of type t and status st.
func (m *metrics) result(t, st string) prometheus.Counter {
	if c, ok := m.results[[2]string{t, st}]; ok {
		return c
	}
	return m.probes.WithLabelValues(t, st)
}
