package push

import (
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// A ServiceEntry with a workloadSelector (config.EntrySelection) has the
// registry instances of its namespace whose labels match as endpoints, of
// any service, WorkloadEntries' among them. The endpoint path follows
// them: an instance change of a service of namespace N marks, besides the
// service, every service of N whose entry selects instances
// (selectedIndex); recomputing one reads the namespace's matching
// instances then. A change's instance may have matched before and not now
// (or been deleted): the entry is recomputed either way, without knowing.

// selectedIndex lists, per namespace, the services whose entry selects
// instances. The config worker writes it when it stores a spec (note);
// the follower reads it for every instance change (in), without a lock.
type selectedIndex struct {
	by   map[naming.ServiceKey]string // config worker only
	snap atomic.Pointer[map[string][]naming.ServiceKey]
}

// note records spec entry of s. Config worker only.
func (x *selectedIndex) note(s naming.ServiceKey, entry *config.EntryService) {
	ns, was := x.by[s]
	sel := entry != nil && entry.Selected != nil
	if !sel && !was || sel && was && ns == entry.Selected.Namespace {
		return
	}
	if x.by == nil {
		x.by = map[naming.ServiceKey]string{}
	}
	if sel {
		x.by[s] = entry.Selected.Namespace
	} else {
		delete(x.by, s)
	}
	m := make(map[string][]naming.ServiceKey, len(x.by))
	for k, ns := range x.by {
		m[ns] = append(m[ns], k)
	}
	x.snap.Store(&m)
}

// in returns the services whose entry selects instances of namespace ns.
// Any goroutine.
func (x *selectedIndex) in(ns string) []naming.ServiceKey {
	if m := x.snap.Load(); m != nil {
		return (*m)[ns]
	}
	return nil
}

// markSelecting marks the services whose entry may select an instance of
// service s, which changed. Follower goroutine.
func (e *Engine) markSelecting(s naming.ServiceKey, origin time.Time) {
	for _, k := range e.selected.in(s.Namespace) {
		if k != s {
			e.ep.mark(k, origin)
		}
	}
}

// selectedEndpoints calls fn with the endpoints of cluster c of s that
// its entry's workloadSelector selects: the matching instances of the
// entry's namespace and the cluster's subset, of services other than s
// (s's own are its endpoints anyway), on the cluster's port (none: the
// entry's first).
func (e *Engine) selectedEndpoints(s naming.ServiceKey, spec *serviceSpec, c clusterSpec, fn func(xds.Endpoint)) {
	if spec.entry == nil || spec.entry.Selected == nil {
		return
	}
	sel := spec.entry.Selected
	p := sel.FirstPort()
	if c.port != 0 {
		p = sel.PortFor(c.port)
	}
	if p == nil {
		return
	}
	match := sel.Selector
	if len(c.sel) > 0 {
		match = append(match[:len(match):len(match)], c.sel...)
	}
	e.src.InstancesIn(sel.Namespace, match, func(in *instance.Instance) {
		port := p.Port(in)
		if in.Key() == s || port == 0 {
			return
		}
		fn(xds.Endpoint{
			ID: in.ID, Host: in.Host, Port: port, Weight: uint32(min(max(in.Weight, 0), 1<<16)),
			Healthy: in.Healthy, Isolated: in.Isolated, Metadata: in.Labels(),
		})
	})
}

// selectedHTTP2 reports whether cluster c's port of an entry selecting
// instances is of protocol GRPC or HTTP2.
func selectedHTTP2(sel *config.EntrySelection, c clusterSpec) bool {
	p := sel.FirstPort()
	if c.port != 0 {
		p = sel.PortFor(c.port)
	}
	return p != nil && p.HTTP2
}
