package push

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/locality"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// endpointQueue is the endpoint path's queue: the services whose instances
// changed, in the order they first changed, each once with the commit time
// of its oldest unprocessed change. Marking never blocks.
type endpointQueue struct {
	mu    sync.Mutex
	order []naming.ServiceKey
	dirty map[naming.ServiceKey]epMark
	wake  chan struct{}
	// idle is closed while nothing is queued or being computed (quiet);
	// config work waits on it (waitIdle).
	idle  chan struct{}
	quiet bool
	// marks counts the marks ever made; taken is the first mark of the
	// service being computed (0: none). Every mark up to doneThrough has
	// been published (WaitPublished). progress is called after each take.
	marks    uint64
	taken    uint64
	progress func()
}

// epMark is a queued service's oldest unprocessed change: its commit time
// and the mark's number.
type epMark struct {
	origin time.Time
	seq    uint64
}

func (q *endpointQueue) init() {
	q.dirty = map[naming.ServiceKey]epMark{}
	q.wake = make(chan struct{}, 1)
	q.idle = make(chan struct{})
	close(q.idle)
	q.quiet = true
}

func (q *endpointQueue) mark(s naming.ServiceKey, origin time.Time) {
	q.mu.Lock()
	q.marks++
	if _, ok := q.dirty[s]; !ok {
		q.dirty[s] = epMark{origin, q.marks}
		q.order = append(q.order, s)
	}
	if q.quiet {
		q.quiet = false
		q.idle = make(chan struct{})
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the next service to compute. The queue stays busy until a
// take finds it empty: the worker takes until then.
func (q *endpointQueue) take() (naming.ServiceKey, time.Time, bool) {
	if q.progress != nil {
		defer q.progress() // the previous take's service is published
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		if !q.quiet {
			q.quiet = true
			close(q.idle)
		}
		q.taken = 0
		return naming.ServiceKey{}, time.Time{}, false
	}
	s := q.order[0]
	q.order = q.order[1:]
	m := q.dirty[s]
	delete(q.dirty, s)
	q.taken = m.seq
	return s, m.origin, true
}

// markCount returns how many marks were ever made.
func (q *endpointQueue) markCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.marks
}

// doneThrough returns the number up to which every mark has been
// computed and published: the queue is in order of first marks, and the
// service being computed covers every mark of it before it was taken.
func (q *endpointQueue) doneThrough() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.marks
	if len(q.order) > 0 {
		w = min(w, q.dirty[q.order[0]].seq-1)
	}
	if q.taken != 0 {
		w = min(w, q.taken-1)
	}
	return w
}

// waitIdle waits until no endpoint work is queued or running, at most
// most: config work gives way to endpoint work.
func (q *endpointQueue) waitIdle(ctx context.Context, most time.Duration) {
	q.mu.Lock()
	idle := q.idle
	q.mu.Unlock()
	select {
	case <-idle:
		return
	default:
	}
	t := time.NewTimer(most)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	case <-ctx.Done():
	}
}

func (q *endpointQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

// endpointLoop is the endpoint worker. It shares nothing with the config
// worker but the published specs and usable flags, so no config work can
// hold it up.
func (e *Engine) endpointLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.ep.wake:
		}
		for ctx.Err() == nil {
			s, origin, ok := e.ep.take()
			if !ok {
				break
			}
			if e.slowEP != nil {
				e.slowEP()
			}
			e.recomputeEndpoints(s, e.version(), origin)
		}
	}
}

// serviceSpec is the clusters of one service whose endpoints are computed:
// the whole service, each DestinationRule subset, and the port-restricted
// variants routes name. Immutable once published.
type serviceSpec struct {
	clusters []clusterSpec
	// entry is what the ServiceEntry in force for the service gives it
	// (entry.go); nil: none.
	entry *config.EntryService
}

type clusterSpec struct {
	name   string
	subset string
	port   uint32
	sel    label.Selector
	// locality is the DestinationRule's localityLbSetting for the cluster
	// (nil: Istio's defaults), carried with its EDS resource.
	locality *locality.Rules
	// publish: the endpoint set is published. Subset and port clusters
	// always are (CDS carries them only while they have usable endpoints);
	// the whole service's only when something routes to it.
	publish bool
	// usable: whether a subset or port cluster has a usable endpoint, kept
	// by the endpoint worker (and filled in by the config worker when
	// unknown); carried from a service's previous spec to the next for the
	// same cluster name. Nil for the whole service.
	usable *usableFlag
}

// usableFlag is a cluster's "has a usable endpoint": unknown, no or yes.
type usableFlag struct{ v atomic.Int32 }

const (
	usableUnknown int32 = iota
	usableNo
	usableYes
)

func usableValue(b bool) int32 {
	if b {
		return usableYes
	}
	return usableNo
}

// publishes reports whether the endpoint worker keeps the set of cluster
// name up to date.
func (sp *serviceSpec) publishes(name string) bool {
	for _, c := range sp.clusters {
		if c.name == name {
			return c.publish && !sp.dnsEntry()
		}
	}
	return false
}

func defaultSpec(s naming.ServiceKey) *serviceSpec {
	return &serviceSpec{clusters: []clusterSpec{{name: xds.ClusterName(s, "", 0), publish: true}}}
}

func (e *Engine) spec(s naming.ServiceKey) *serviceSpec {
	if v, ok := e.specs.Load(s); ok {
		return v.(*serviceSpec)
	}
	return defaultSpec(s)
}

// recomputeEndpoints publishes the endpoint sets of every cluster of s and
// tells the config path when a subset cluster gained its first usable
// endpoint or lost its last (routes to it change).
func (e *Engine) recomputeEndpoints(s naming.ServiceKey, version string, origin time.Time) {
	start := time.Now()
	if origin.IsZero() {
		origin = start
	}
	spec := e.spec(s)
	res := make([]xds.Resource, 0, len(spec.clusters))
	var removed []string
	flipped := false
	for _, c := range spec.clusters {
		if spec.dnsEntry() {
			// A DNS entry's clusters carry their endpoints: no EDS.
			removed = append(removed, c.name)
			continue
		}
		if !c.publish {
			// No route names the whole service: its set is no longer kept
			// up to date. While CDS still carries the cluster (its grace
			// period) the set stays, and configWorker.retire removes both;
			// a set CDS never carried (published before the first config
			// round) goes now.
			if _, _, carried := e.cache.Get(xds.TypeCluster, c.name); !carried {
				removed = append(removed, c.name)
			}
			continue
		}
		eps, usable := e.endpoints(s, spec, c)
		res = append(res, xds.Resource{Name: c.name, Version: version, Message: xds.LoadAssignmentFor(c.name, eps, c.locality), Locality: c.locality})
		if c.usable != nil {
			if old := c.usable.v.Swap(usableValue(usable)); old != usableUnknown && old != usableValue(usable) {
				flipped = true
			}
		}
	}
	if _, err := e.cache.Apply(xds.TypeEndpoint, res, removed, version, origin); err != nil {
		e.log.Error("push: endpoints", "service", s.String(), "error", err)
	}
	if flipped {
		e.cfg.emptiness(s, origin)
	}
	e.stats.endpointRuns.Add(1)
	e.m.recompute.WithLabelValues("endpoint").Observe(time.Since(start).Seconds())
}

// endpoints reads the instances of cluster c of s through the source's
// label index, and counts the usable ones.
func (e *Engine) endpoints(s naming.ServiceKey, spec *serviceSpec, c clusterSpec) ([]xds.Endpoint, bool) {
	eps := entryEndpoints(spec, c)
	usable := false
	for i := range eps {
		usable = usable || eps[i].Usable()
	}
	e.src.Instances(s, c.sel, func(in *instance.Instance) {
		if in.Port == 0 || c.port != 0 && in.Port != int(c.port) {
			return // no port (instance.NoPortLabel): not an endpoint
		}
		ep := xds.Endpoint{
			ID: in.ID, Host: in.Host, Port: uint32(in.Port), Weight: uint32(min(max(in.Weight, 0), 1<<16)),
			Healthy: in.Healthy, Isolated: in.Isolated, Metadata: in.Labels(),
		}
		usable = usable || ep.Usable()
		eps = append(eps, ep)
	})
	if spec.entry != nil && spec.entry.Selected != nil {
		// Checked here: the closure would be allocated for every cluster.
		e.selectedEndpoints(s, spec, c, func(ep xds.Endpoint) {
			usable = usable || ep.Usable()
			eps = append(eps, ep)
		})
	}
	return eps, usable
}

// hasUsable answers whether cluster c of s has a usable endpoint, for the
// config worker: the endpoint worker's answer if it gave one, else counted
// now and remembered unless the endpoint worker answered meanwhile.
func (e *Engine) hasUsable(s naming.ServiceKey, c clusterSpec) bool {
	if spec := e.spec(s); spec.dnsEntry() {
		// Endpoints by name: usable once resolved, which the client does.
		return len(entryEndpoints(spec, c)) > 0
	}
	if c.usable == nil {
		return e.anyUsable(s, c)
	}
	if v := c.usable.v.Load(); v != usableUnknown {
		return v == usableYes
	}
	c.usable.v.CompareAndSwap(usableUnknown, usableValue(e.anyUsable(s, c)))
	return c.usable.v.Load() == usableYes
}

// anyUsable reports whether cluster c of s has a usable endpoint, as
// endpoints counts them, without building them.
func (e *Engine) anyUsable(s naming.ServiceKey, c clusterSpec) bool {
	usable := false
	for _, ep := range entryEndpoints(e.spec(s), c) {
		usable = usable || ep.Usable()
	}
	e.src.Instances(s, c.sel, func(in *instance.Instance) {
		if usable || in.Port == 0 || (c.port != 0 && in.Port != int(c.port)) {
			return
		}
		ep := xds.Endpoint{Host: in.Host, Weight: uint32(min(max(in.Weight, 0), 1<<16)), Healthy: in.Healthy, Isolated: in.Isolated}
		usable = ep.Usable()
	})
	if spec := e.spec(s); !usable && spec.entry != nil && spec.entry.Selected != nil {
		e.selectedEndpoints(s, spec, c, func(ep xds.Endpoint) { usable = usable || ep.Usable() })
	}
	return usable
}
