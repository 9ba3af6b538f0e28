package push

import (
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// AddressFinder is what the engine asks its Source, when the Source has
// it, to find the workload behind a proxyless gRPC server's listening
// address.
type AddressFinder interface {
	// InstanceAt returns a registered instance whose host and port are
	// ap's, or nil. Called from the config goroutine and from xDS server
	// goroutines, concurrently; must not wait for writers.
	InstanceAt(ap netip.AddrPort) *instance.Instance
}

// serverReq is one server listener a subscriber asked for.
type serverReq struct {
	name, ns string // ns: the subscriber's node namespace
	addr     netip.AddrPort
}

// servers records the server listeners subscribers asked for, so that a
// policy or workload change republishes them. Its mutex is taken alone.
type servers struct {
	any  atomic.Bool // some listener was asked for: instance changes are checked
	mu   sync.Mutex
	reqs map[string]serverReq         // by cache key
	svcs map[naming.ServiceKey]bool   // services of the workloads found
	open bool                         // some request found no workload
	seen map[string]naming.ServiceKey // cache key -> its workload's service
}

// add records a request; it reports whether the key is new.
func (s *servers) add(key string, r serverReq) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reqs == nil {
		s.reqs = map[string]serverReq{}
		s.svcs = map[naming.ServiceKey]bool{}
		s.seen = map[string]naming.ServiceKey{}
	}
	_, had := s.reqs[key]
	s.reqs[key] = r
	s.any.Store(true)
	return !had
}

func (s *servers) all() map[string]serverReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.reqs)
}

// resolved records which service each listener's workload is in (zero: not
// found), for watches.
func (s *servers) resolved(svcs map[string]naming.ServiceKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.svcs)
	s.open = false
	for k, svc := range svcs {
		s.seen[k] = svc
		if svc == (naming.ServiceKey{}) {
			if a := s.reqs[k].addr.Addr(); !a.IsUnspecified() {
				s.open = true
			}
			continue
		}
		s.svcs[svc] = true
	}
}

// watches reports whether an instance change of svc may change a server
// listener: its workload is in svc, or some listener's workload is not
// found yet (and may be an instance of svc).
func (s *servers) watches(svc naming.ServiceKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open || s.svcs[svc]
}

// serverListener builds the listener of a server request with the
// security policies in force now, and the service of the workload it found
// (zero when none).
func (e *Engine) serverListener(key string, r serverReq) (xds.Resource, naming.ServiceKey) {
	w := config.Workload{Namespace: r.ns, Port: uint32(r.addr.Port())}
	if w.Namespace == "" {
		w.Namespace = "default"
	}
	var svc naming.ServiceKey
	// An unspecified address (0.0.0.0, [::]) names no instance: the
	// workload is then the node's namespace, without labels.
	if f, ok := e.src.(AddressFinder); ok && !r.addr.Addr().IsUnspecified() {
		if in := f.InstanceAt(r.addr); in != nil {
			w.Namespace, w.Labels = in.Namespace, in.Labels()
			svc = naming.ServiceKey{Namespace: in.Namespace, Name: in.Service}
		}
	}
	sec := e.security()
	msg := xds.ServerListener(r.name, r.addr, sec.MTLSMode(w), sec.Authorization(w))
	return encoded(xds.Resource{Name: r.name, Key: key, Version: e.version(), Hidden: true, Message: msg}), svc
}

// security is the security policies in force.
func (e *Engine) security() *config.Security {
	if s := e.sec.Load(); s != nil {
		return s
	}
	return config.NewSecurity(e.opts.RootNamespace, nil)
}

// publishServers rebuilds every server listener subscribers asked for and
// publishes those that changed. Called from the config goroutine.
func (e *Engine) publishServers(origin time.Time) {
	reqs := e.servers.all()
	if len(reqs) == 0 {
		return
	}
	keys := slices.Sorted(maps.Keys(reqs))
	set := make([]xds.Resource, 0, len(keys))
	svcs := make(map[string]naming.ServiceKey, len(keys))
	for _, k := range keys {
		r, svc := e.serverListener(k, reqs[k])
		set = append(set, r)
		svcs[k] = svc
	}
	e.servers.resolved(svcs)
	if _, err := e.cache.Apply(xds.TypeListener, set, nil, e.version(), origin); err != nil {
		e.log.Error("push: publish server listeners", "error", err)
	}
}

// securityChanged takes the security objects of a config batch into the
// worker's set; it reports whether any changed.
func (w *configWorker) securityChanged(b configBatch) bool {
	changed := false
	if b.snap != nil {
		w.sec = map[config.Key]*config.Object{}
		for _, o := range b.snap.Configs {
			if config.IsSecurity(o.Kind) {
				w.sec[o.Key] = o
			}
		}
		changed = true
	}
	for _, ch := range b.changes {
		if !config.IsSecurity(ch.ConfigKey.Kind) {
			continue
		}
		changed = true
		if ch.Op == ConfigUpsert {
			w.sec[ch.ConfigKey] = ch.Config
		} else {
			delete(w.sec, ch.ConfigKey)
		}
	}
	return changed
}

// servers publishes the security policies a batch changed and the server
// listeners they, or instance changes of their workloads, change. It runs
// before the round's service work: a policy change goes out without
// waiting for route recomputation.
func (w *configWorker) servers(b configBatch) {
	secChanged := w.securityChanged(b)
	if secChanged {
		w.e.sec.Store(config.NewSecurity(w.e.opts.RootNamespace, slices.Collect(maps.Values(w.sec))))
	}
	if !secChanged && !b.workloads {
		return
	}
	origin := b.origin
	if origin.IsZero() {
		origin = time.Now()
	}
	w.e.publishServers(origin)
}
