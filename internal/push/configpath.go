package push

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/locality"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// configQueue is the config path's queue: config changes in order, services
// seen for the first time, services whose subset clusters gained their
// first or lost their last usable endpoint, and a snapshot to start again
// from. Adding never blocks.
type configQueue struct {
	mu       sync.Mutex
	changes  []Change
	services map[naming.ServiceKey]bool
	emptied  map[naming.ServiceKey]bool
	snap     *Snapshot
	// workloads: a server listener's workload may have changed (a new
	// server listener, or an instance change of the services in
	// workloadSvcs).
	workloads    bool
	workloadSvcs map[naming.ServiceKey]bool
	origin       time.Time // commit time of the oldest queued item
	first        time.Time // arrival of the first and last queued config change (debounce)
	last         time.Time
	wake         chan struct{}
	// queued counts the items ever queued; done is queued as taken by the
	// last round that finished publishing (WaitPublished).
	queued uint64
	done   atomic.Uint64
}

func (q *configQueue) init() {
	q.services = map[naming.ServiceKey]bool{}
	q.emptied = map[naming.ServiceKey]bool{}
	q.wake = make(chan struct{}, 1)
}

func (q *configQueue) add(origin time.Time, f func()) {
	q.mu.Lock()
	f()
	q.queued++
	if q.origin.IsZero() || origin.Before(q.origin) {
		q.origin = origin
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *configQueue) change(ch Change, origin time.Time) {
	now := time.Now()
	q.add(origin, func() {
		if len(q.changes) == 0 {
			q.first = now
		}
		q.last = now
		q.changes = append(q.changes, ch)
	})
}

func (q *configQueue) service(s naming.ServiceKey, origin time.Time) {
	q.add(origin, func() { q.services[s] = true })
}

// workloadsChanged queues a republication of the server listeners: svc
// (zero: none) had an instance change.
func (q *configQueue) workloadsChanged(svc naming.ServiceKey, origin time.Time) {
	q.add(origin, func() {
		q.workloads = true
		if svc != (naming.ServiceKey{}) {
			if q.workloadSvcs == nil {
				q.workloadSvcs = map[naming.ServiceKey]bool{}
			}
			q.workloadSvcs[svc] = true
		}
	})
}

func (q *configQueue) emptiness(s naming.ServiceKey, origin time.Time) {
	q.add(origin, func() { q.emptied[s] = true })
}

// reset queues a snapshot to start again from; queued changes it already
// holds are dropped, later ones stay.
func (q *configQueue) reset(snap Snapshot) {
	q.add(time.Now(), func() {
		q.snap = &snap
		kept := q.changes[:0]
		for _, ch := range q.changes {
			if ch.Revision > snap.Revision {
				kept = append(kept, ch)
			}
		}
		q.changes = kept
	})
}

type configBatch struct {
	changes      []Change
	services     map[naming.ServiceKey]bool
	emptied      map[naming.ServiceKey]bool
	snap         *Snapshot
	workloads    bool
	workloadSvcs map[naming.ServiceKey]bool
	origin       time.Time
	queued       uint64 // configQueue.queued when taken
}

func (q *configQueue) take() configBatch {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := configBatch{changes: q.changes, services: q.services, emptied: q.emptied, snap: q.snap, workloads: q.workloads,
		workloadSvcs: q.workloadSvcs, origin: q.origin, queued: q.queued}
	q.changes, q.snap, q.origin, q.workloads, q.workloadSvcs = nil, nil, time.Time{}, false, nil
	q.services = map[naming.ServiceKey]bool{}
	q.emptied = map[naming.ServiceKey]bool{}
	return b
}

// queuedCount returns how many items were ever queued.
func (q *configQueue) queuedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued
}

func (q *configQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.changes) + len(q.services) + len(q.emptied)
	if q.workloads {
		n++
	}
	return n
}

// deadline is when a debounced round may start; zero when no config change
// is queued.
func (q *configQueue) deadline(after, most time.Duration) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.changes) == 0 || after < 0 {
		return time.Time{}
	}
	d := q.last.Add(after)
	if m := q.first.Add(most); m.Before(d) {
		d = m
	}
	return d
}

// configWorker owns the config index and what the config path published
// per service. Only its goroutine touches it.
type configWorker struct {
	e         *Engine
	ix        *config.Index
	known     map[naming.ServiceKey]bool
	sorted    []naming.ServiceKey // known, sorted (the proxy's virtual hosts)
	clusters  map[naming.ServiceKey][]string
	vhosts    map[naming.ServiceKey][]byte
	dirty     map[naming.ServiceKey]bool
	origin    time.Time
	proxyDirt bool
	// retiring holds clusters no route names, with when to remove them.
	retiring map[string]retiring
	workers  int // goroutines a round builds on (Options.ConfigWorkers)
	// sec holds the security objects (PeerAuthentication,
	// AuthorizationPolicy) in force; they configure server listeners.
	sec map[config.Key]*config.Object
	// side holds the Sidecars and ServiceEntries in force (sidecars.go).
	side map[config.Key]*config.Object
}

func newConfigWorker(e *Engine) *configWorker {
	return &configWorker{
		e: e, ix: config.NewIndex(), known: map[naming.ServiceKey]bool{},
		clusters: map[naming.ServiceKey][]string{}, vhosts: map[naming.ServiceKey][]byte{},
		dirty:    map[naming.ServiceKey]bool{},
		retiring: map[string]retiring{}, workers: e.opts.ConfigWorkers, sec: map[config.Key]*config.Object{},
	}
}

func (w *configWorker) services() []naming.ServiceKey { return w.sorted }

func (w *configWorker) touch(s naming.ServiceKey) {
	w.dirty[s] = true
	if !w.known[s] {
		w.known[s] = true
		i, _ := slices.BinarySearchFunc(w.sorted, s, naming.ServiceKey.Compare)
		w.sorted = slices.Insert(w.sorted, i, s)
	}
}

// reset replaces the index with a snapshot's config and marks every
// service dirty; services that lost their config get their defaults back.
func (w *configWorker) reset(snap Snapshot) {
	w.ix = config.NewIndex()
	for _, o := range snap.Configs {
		w.ix.Put(o)
	}
	for s := range w.known {
		w.dirty[s] = true
	}
	for _, s := range snap.Services {
		w.touch(s)
	}
	for _, s := range w.ix.Services() {
		w.touch(s)
	}
}

func (w *configWorker) apply(b configBatch) {
	if b.snap != nil {
		w.reset(*b.snap)
	}
	for _, ch := range b.changes {
		var touched []naming.ServiceKey
		switch ch.Op {
		case ConfigUpsert:
			touched = w.ix.Put(ch.Config)
		case ConfigDelete:
			touched = w.ix.Delete(ch.ConfigKey)
		}
		for _, s := range touched {
			w.touch(s)
		}
	}
	for s := range b.services {
		w.touch(s)
	}
	for s := range b.emptied {
		w.touch(s)
		for _, h := range w.ix.RoutesTo(s) {
			w.touch(h)
		}
	}
	if w.origin.IsZero() || (!b.origin.IsZero() && b.origin.Before(w.origin)) {
		w.origin = b.origin
	}
}

// loop is the config worker: it waits for queued work, lets config changes
// settle for the debounce period, and recomputes what they touched.
func (w *configWorker) loop(ctx context.Context) {
	q := &w.e.cfg
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	retire := time.NewTimer(time.Hour)
	defer retire.Stop()
	for {
		if next, ok := w.nextRetirement(); ok {
			retire.Reset(time.Until(next))
		} else {
			retire.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-retire.C:
			w.retire(time.Now())
			continue
		case <-q.wake:
		}
		for {
			d := q.deadline(w.e.opts.Debounce, w.e.opts.DebounceMax)
			wait := time.Until(d)
			if d.IsZero() || wait <= 0 {
				break
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			case <-q.wake: // more changes: the quiet period starts again
				if !timer.Stop() {
					<-timer.C
				}
			}
		}
		b := q.take()
		w.apply(b)
		w.servers(b)
		w.round(ctx)
		if ctx.Err() == nil {
			q.done.Store(b.queued)
			w.e.advanced()
		}
	}
}

// round recomputes the clusters and routes of every dirty service and
// publishes them: new clusters, then routes, then removals (make before
// break). Once ctx ends it stops between steps and between services,
// publishing nothing more, so a shutdown does not wait for a whole
// recomputation; the worker's state is then half updated, which only a
// worker that stops with ctx may leave behind.
func (w *configWorker) round(ctx context.Context) {
	if len(w.dirty) == 0 {
		// Nothing to publish: the batch's commit time (a security policy,
		// a Gateway) is no origin of a later round's push.
		w.origin = time.Time{}
		return
	}
	if w.e.slowConfig != nil {
		w.e.slowConfig()
	}
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	version := w.e.version()
	origin := w.origin
	if origin.IsZero() {
		origin = start
	}
	dirty := make([]naming.ServiceKey, 0, len(w.dirty))
	for s := range w.dirty {
		dirty = append(dirty, s)
	}
	slices.SortFunc(dirty, naming.ServiceKey.Compare)
	clear(w.dirty)
	w.origin = time.Time{}

	// 1. Cluster specs, shared with the endpoint worker; a service whose
	// clusters changed gets its endpoint sets recomputed.
	dests := make([][]config.Destination, len(dirty))
	for i, s := range dirty {
		dests[i] = w.ix.DestinationsOf(s)
		spec := w.specFor(s, dests[i])
		if old, ok := w.e.specs.Load(s); !ok || !spec.equal(old.(*serviceSpec)) {
			w.e.specs.Store(s, spec)
			w.e.selected.note(s, spec.entry)
			w.e.ep.mark(s, origin)
		}
	}
	// 2. Clusters and routes of each service, built and encoded on
	// ConfigWorkers goroutines (the index is only read meanwhile). Endpoint
	// work goes first: before each service a worker waits while endpoint
	// work is queued (up to maxPause at a time, and pauseBudget in all per
	// round, so that config work is slowed, never stopped), and after each
	// it yields.
	built := make([]builtService, len(dirty))
	var paused atomic.Int64
	parallel(len(dirty), w.workers, func(lo, hi int) {
		var ce xds.ClusterEncoder // this goroutine's
		for i := lo; i < hi; i++ {
			if ctx.Err() != nil {
				return
			}
			if paused.Load() < int64(pauseBudget) {
				t := time.Now()
				w.e.ep.waitIdle(ctx, maxPause)
				paused.Add(int64(time.Since(t)))
			}
			if w.e.slowBuild != nil {
				w.e.slowBuild()
			}
			built[i] = w.build(&ce, dirty[i], dests[i], version)
			runtime.Gosched()
		}
	})
	if ctx.Err() != nil {
		return // built is incomplete
	}
	// 3. Publish new clusters, then routes; retire the unused clusters
	// later (make before break).
	var set, routes []xds.Resource
	type unnamed struct {
		name    string
		service naming.ServiceKey
	}
	var removed []unnamed
	for i, s := range dirty {
		b := &built[i]
		set = append(set, b.clusters...)
		for _, old := range w.clusters[s] {
			if !slices.Contains(b.names, old) {
				removed = append(removed, unnamed{old, s})
			}
		}
		w.clusters[s] = b.names
		routes = append(routes, b.route)
		if string(b.vhost) != string(w.vhosts[s]) {
			w.vhosts[s] = b.vhost
			w.proxyDirt = true
		}
	}
	// A cluster no route names any more is removed only after a grace
	// period: each subscriber sends its pending clusters before its routes,
	// so a removal published with this round would reach a client still
	// routing by the previous routes, and grpc-go fails those calls
	// ("cluster resource removed") until the new routes arrive.
	for _, r := range set {
		delete(w.retiring, r.Name)
	}
	for _, rm := range removed {
		w.retiring[rm.name] = retiring{at: start.Add(w.e.opts.ClusterGrace), service: rm.service}
	}
	w.publish(xds.TypeCluster, set, nil, version, origin)
	if w.proxyDirt {
		w.proxyDirt = false
		routes = append(routes, xds.Resource{Name: xds.ProxyName, Version: version, Value: w.proxyRoutes(), Hidden: true})
	}
	w.publish(xds.TypeRoute, routes, nil, version, origin)
	w.retire(time.Now())

	took := time.Since(start)
	w.e.stats.configRounds.Add(1)
	w.e.stats.lastConfig.Store(int64(took))
	w.e.m.recompute.WithLabelValues("config").Observe(took.Seconds())
}

// nextRetirement is when the next retiring cluster is due.
func (w *configWorker) nextRetirement() (time.Time, bool) {
	var next time.Time
	for _, r := range w.retiring {
		if next.IsZero() || r.at.Before(next) {
			next = r.at
		}
	}
	return next, !next.IsZero()
}

// retiring is a cluster no route names any more, of service, due for
// removal at.
type retiring struct {
	at      time.Time
	service naming.ServiceKey
}

// retire removes the clusters whose grace period ended by now, and the
// endpoint sets the endpoint worker no longer keeps for them (a whole
// service's, left in place while CDS still carried its cluster, so that
// a client asking for it during the grace period is answered).
func (w *configWorker) retire(now time.Time) {
	var names, sets []string
	for name, r := range w.retiring {
		if r.at.After(now) {
			continue
		}
		names = append(names, name)
		delete(w.retiring, name)
		if !w.e.spec(r.service).publishes(name) {
			sets = append(sets, name)
		}
	}
	if len(names) > 0 {
		slices.Sort(names)
		slices.Sort(sets)
		version := w.e.version()
		w.publish(xds.TypeCluster, nil, names, version, now)
		w.publish(xds.TypeEndpoint, nil, sets, version, now)
	}
}

// builtService is what a round computed for one service.
type builtService struct {
	clusters []xds.Resource
	names    []string
	route    xds.Resource
	vhost    []byte // the proxy's virtual host, encoded
}

// build computes the clusters and routes of s. Called from several
// goroutines at once; it only reads the worker's state.
func (w *configWorker) build(ce *xds.ClusterEncoder, s naming.ServiceKey, dests []config.Destination, version string) builtService {
	var b builtService
	dr := w.ix.DestinationRule(s)
	spec := w.e.spec(s)
	for _, c := range w.publishedClusters(s, dests) {
		b.names = append(b.names, c.name)
		r := xds.Resource{Name: c.name, Version: version}
		p := config.EffectivePolicy(dr, c.subset, spec.clusterPort(c))
		if !p.HTTP2 && entryHTTP2(spec, c) {
			p.HTTP2 = true
		}
		if spec.dnsEntry() {
			logical := spec.entry.Resolution == config.ResolveLogicalDNS
			r.Message = xds.DNSCluster(c.name, p, logical, entryEndpoints(spec, c))
			b.clusters = append(b.clusters, encoded(r))
			continue
		}
		if v, err := ce.Encode(c.name, p); err == nil {
			r.Value = v
		} else {
			r.Message = xds.Cluster(c.name, p) // Apply encodes it again and reports the error
		}
		b.clusters = append(b.clusters, r)
	}
	vs := w.ix.VirtualService(s)
	name := xds.RouteName(s)
	// The virtual host is written directly (xds.EncodeVirtualHost: the
	// bytes of the marshalled VirtualHost, without building it).
	enc, err := xds.EncodeVirtualHost(s.String(), s, vs, w.clusterFor, w.hashFor)
	var head, rest []byte
	if err == nil {
		head, rest, err = splitEncoded(enc)
	}
	if err != nil {
		// Not expected; encode the two the long way.
		vh := xds.VirtualHost(s.String(), nil, s, vs, w.clusterFor, w.hashFor)
		vh.Domains = proxyDomains(s)
		b.vhost, _ = (proto.MarshalOptions{Deterministic: true}).Marshal(vh)
		vh.Domains = []string{"*"}
		b.route = encoded(xds.Resource{Name: name, Version: version, Message: xds.RouteConfiguration(name, vh)})
		return b
	}
	// The virtual host is encoded once: the proxy's copy and the service's
	// route configuration differ only in their domains (field 2, right
	// after the name).
	b.vhost = withDomains(head, rest, proxyDomains(s))
	b.route = xds.Resource{Name: name, Version: version, Value: routeConfiguration(name, withDomains(head, rest, []string{"*"}))}
	return b
}

// routeConfiguration encodes a RouteConfiguration of one encoded virtual
// host.
func routeConfiguration(name string, vhost []byte) []byte {
	out := make([]byte, 0, len(name)+len(vhost)+16)
	out = protowire.AppendTag(out, 1, protowire.BytesType) // RouteConfiguration.name
	out = protowire.AppendString(out, name)
	out = protowire.AppendTag(out, 2, protowire.BytesType) // .virtual_hosts
	return protowire.AppendBytes(out, vhost)
}

// splitName encodes vh (without domains) and splits it after its first
// field, the name: the deterministic encoding writes fields in number
// order.
func splitName(vh *routev3.VirtualHost) (head, rest []byte, err error) {
	if len(vh.Domains) != 0 || vh.Name == "" {
		return nil, nil, errors.New("push: virtual host with domains or without a name")
	}
	b, err := xds.Encode(vh)
	if err != nil {
		return nil, nil, err
	}
	return splitEncoded(b)
}

// splitEncoded splits an encoded virtual host without domains after its
// name.
func splitEncoded(b []byte) (head, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil, nil, errors.New("push: virtual host encoding does not start with its name")
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	if m < 0 {
		return nil, nil, protowire.ParseError(m)
	}
	return b[:n+m], b[n+m:], nil
}

// withDomains is a virtual host's encoding from its split encoding and
// domains.
func withDomains(head, rest []byte, domains []string) []byte {
	size := len(head) + len(rest)
	for _, d := range domains {
		size += len(d) + 3
	}
	out := make([]byte, 0, size)
	out = append(out, head...)
	for _, d := range domains {
		out = protowire.AppendTag(out, 2, protowire.BytesType) // VirtualHost.domains
		out = protowire.AppendString(out, d)
	}
	return append(out, rest...)
}

// encoded encodes r's Message on the calling worker, so that the encoding
// is within the config budget rather than on every core in Cache.Apply;
// on an error Apply encodes it again and reports it.
func encoded(r xds.Resource) xds.Resource {
	if v, err := xds.Encode(r.Message); err == nil {
		r.Value = v
	}
	return r
}

// maxPause is the longest a config worker waits for endpoint work at a
// time, pauseBudget the longest a round waits in all: an endpoint service
// takes well under a millisecond.
const (
	maxPause    = 5 * time.Millisecond
	pauseBudget = 100 * time.Millisecond
)

// parallel runs f over [0, n) split across workers goroutines.
func parallel(n, workers int, f func(lo, hi int)) {
	procs := workers
	if n < 256 || procs < 2 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + procs - 1) / procs
	for lo := 0; lo < n; lo += step {
		wg.Add(1)
		go func() { defer wg.Done(); f(lo, min(lo+step, n)) }()
	}
	wg.Wait()
}

func (w *configWorker) publish(t xds.Type, set []xds.Resource, removed []string, version string, origin time.Time) {
	if len(set) == 0 && len(removed) == 0 {
		return
	}
	if _, err := w.e.cache.Apply(t, set, removed, version, origin); err != nil {
		w.e.log.Error("push: publish", "type", t.String(), "error", err)
	}
}

// specFor lists the clusters of s whose endpoints are computed: the whole
// service, each subset of its DestinationRule, and the port-restricted
// variants that routes name.
func (w *configWorker) specFor(s naming.ServiceKey, dests []config.Destination) *serviceSpec {
	dr := w.ix.DestinationRule(s)
	// The whole service's cluster when a route names it: the default
	// route, a mesh VirtualService, or one of Gateways (ingress routes by
	// the push engine's clusters).
	whole := w.ix.VirtualService(s) == nil || slices.Contains(dests, config.Destination{Service: s}) || w.ix.GatewayRoutesToWhole(s)
	rules := func(subset string, port uint32) *locality.Rules {
		return config.EffectivePolicy(dr, subset, port).Locality
	}
	spec := &serviceSpec{clusters: []clusterSpec{{name: xds.ClusterName(s, "", 0), publish: whole, locality: rules("", 0)}}, entry: w.ix.Entry(s)}
	// A cluster keeps its usable flag from the previous spec.
	prev := w.e.spec(s)
	flag := func(name string) *usableFlag {
		for _, c := range prev.clusters {
			if c.name == name && c.usable != nil {
				return c.usable
			}
		}
		return &usableFlag{}
	}
	if dr != nil {
		for _, sub := range dr.DestinationRule.Subsets {
			sel, _ := config.SubsetSelector(dr, sub.Name)
			name := xds.ClusterName(s, sub.Name, 0)
			spec.clusters = append(spec.clusters, clusterSpec{name: name, subset: sub.Name, sel: sel, publish: true, usable: flag(name),
				locality: rules(sub.Name, 0)})
		}
	}
	for _, d := range dests {
		if d.Port == 0 {
			continue
		}
		sel, ok := config.SubsetSelector(dr, d.Subset)
		if d.Subset != "" && !ok {
			continue
		}
		name := xds.ClusterName(s, d.Subset, d.Port)
		spec.clusters = append(spec.clusters, clusterSpec{name: name, subset: d.Subset, port: d.Port, sel: sel, publish: true, usable: flag(name),
			locality: rules(d.Subset, d.Port)})
	}
	return spec
}

// equal reports whether two specs list the same clusters with the same
// selectors and publication (the usable flags are carried, not compared).
func (a *serviceSpec) equal(b *serviceSpec) bool {
	return reflect.DeepEqual(a.entry, b.entry) && slices.EqualFunc(a.clusters, b.clusters, func(x, y clusterSpec) bool {
		return x.name == y.name && x.subset == y.subset && x.port == y.port && x.publish == y.publish && x.locality.Equal(y.locality) &&
			slices.EqualFunc(x.sel, y.sel, func(p, q label.Requirement) bool {
				return p.Key == q.Key && p.Op == q.Op && slices.Equal(p.Values, q.Values)
			})
	})
}

// publishedClusters are the clusters of s that CDS carries: the whole
// service (and its port variants) when some route sends traffic there, a
// subset (and its port variants) only while it has a usable endpoint. So no
// empty subset cluster exists for traffic to be routed to (seed fix 2).
func (w *configWorker) publishedClusters(s naming.ServiceKey, dests []config.Destination) []clusterSpec {
	var out []clusterSpec
	for _, c := range w.e.spec(s).clusters {
		ref := slices.Contains(dests, config.Destination{Service: s, Subset: c.subset, Port: c.port})
		switch {
		case c.subset == "" && c.port == 0:
			if c.publish {
				out = append(out, c)
			}
		case c.subset == "":
			if ref {
				out = append(out, c)
			}
		default:
			if (c.port == 0 || ref) && w.e.hasUsable(s, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// clusterFor answers the route builder: the cluster of a destination, and
// whether it may receive traffic (a subset cluster needs its subset defined
// and a usable endpoint).
func (w *configWorker) clusterFor(d config.Destination) (string, bool) {
	if d.Subset != "" && !config.HasSubset(w.ix.DestinationRule(d.Service), d.Subset) {
		return "", false
	}
	// The spec's name, rather than a new string per route.
	for _, c := range w.e.spec(d.Service).clusters {
		if c.subset == d.Subset && c.port == d.Port {
			return c.name, d.Subset == "" || w.e.hasUsable(d.Service, c)
		}
	}
	if d.Subset == "" {
		return xds.ClusterName(d.Service, "", d.Port), true
	}
	return "", false // a port variant no route of the index names (never)
}

// hashFor answers the route builder: what a destination's consistent-hash
// policy hashes.
func (w *configWorker) hashFor(d config.Destination) config.HashKey {
	return config.HashOf(w.ix.DestinationRule(d.Service), d.Subset)
}

// proxyDomains are the names a proxy matches for s: name.namespace,
// name.namespace.svc, name.namespace.svc.cluster.local, and the bare name
// for services in namespace "default".
func proxyDomains(s naming.ServiceKey) []string {
	d := config.Hostnames(s)
	if s.Namespace == "default" {
		d = append([]string{s.Name}, d...)
	}
	return d
}

// proxyRoutes encodes the proxy's route configuration by concatenating
// every service's encoded virtual host: a route change re-encodes one
// virtual host, not all of them.
func (w *configWorker) proxyRoutes() []byte {
	size := 16
	for _, b := range w.vhosts {
		size += len(b) + 6
	}
	out := make([]byte, 0, size)
	out = protowire.AppendTag(out, 1, protowire.BytesType)
	out = protowire.AppendString(out, xds.ProxyName)
	for _, s := range w.sorted {
		if b, ok := w.vhosts[s]; ok {
			out = protowire.AppendTag(out, 2, protowire.BytesType)
			out = protowire.AppendBytes(out, b)
		}
	}
	return out
}
