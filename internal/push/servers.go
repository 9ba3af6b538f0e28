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
	at       time.Time // when it was first asked for
}

// serverGrace is how long a server listener is kept after it was first
// asked for before it may be dropped for having no subscriber (the
// subscriber names it a moment after asking). Atomic: tests change it while
// an engine's workers read it.
var serverGrace atomic.Int64 // time.Duration

func init() { serverGrace.Store(int64(time.Minute)) }

// servers records the server listeners subscribers asked for and the
// workload each was resolved to, so that a policy change republishes them
// without resolving again, and an instance change of their services
// resolves them again. Its mutex is taken alone.
type servers struct {
	any  atomic.Bool // some listener was asked for: instance changes are checked
	mu   sync.Mutex
	reqs map[string]serverReq       // by cache key
	wl   map[string]workload        // by cache key: the last resolution
	svcs map[naming.ServiceKey]bool // services of the workloads found
	open bool                       // some request at a specific address found no workload
	// resolving: the config goroutine is resolving the requests (from
	// all to resolved); an instance change seen meanwhile may postdate
	// its reads while svcs does not name its service yet.
	resolving bool
}

// workload is what a server listener was built for.
type workload struct {
	w   config.Workload
	svc naming.ServiceKey // zero: no instance found at the address
}

// add records a request; it reports whether the key is new.
func (s *servers) add(key string, r serverReq) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reqs == nil {
		s.reqs = map[string]serverReq{}
		s.wl = map[string]workload{}
		s.svcs = map[naming.ServiceKey]bool{}
	}
	if _, had := s.reqs[key]; had {
		return false
	}
	s.reqs[key] = r
	s.any.Store(true)
	return true
}

// drop forgets the requests under keys.
func (s *servers) drop(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.reqs, k)
		delete(s.wl, k)
	}
}

// all returns the requests and their last resolutions, for a resolution
// that ends with resolved.
func (s *servers) all() (map[string]serverReq, map[string]workload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resolving = true
	return maps.Clone(s.reqs), maps.Clone(s.wl)
}

// resolved records each listener's workload, for watches and for the next
// policy change.
func (s *servers) resolved(wl map[string]workload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wl = wl
	clear(s.svcs)
	s.open, s.resolving = false, false
	for k, w := range wl {
		if w.svc == (naming.ServiceKey{}) {
			if a := s.reqs[k].addr.Addr(); !a.IsUnspecified() {
				s.open = true
			}
			continue
		}
		s.svcs[w.svc] = true
	}
}

// watches reports whether an instance change of svc may change a server
// listener: its workload is in svc, or some listener's workload is not
// found yet (and may be an instance of svc), or a resolution under way may
// have read the registry before the change.
func (s *servers) watches(svc naming.ServiceKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open || s.resolving || s.svcs[svc]
}

// resolve finds the workload of a request with find (nil: none found). An
// unspecified address (0.0.0.0, [::]) names no instance: the workload is
// then the node's namespace, without labels.
func resolve(r serverReq, find func(netip.AddrPort) *instance.Instance) workload {
	w := workload{w: config.Workload{Namespace: r.ns, Port: uint32(r.addr.Port())}}
	if w.w.Namespace == "" {
		w.w.Namespace = "default"
	}
	if find == nil || r.addr.Addr().IsUnspecified() {
		return w
	}
	if in := find(r.addr); in != nil {
		w.w.Namespace, w.w.Labels = in.Namespace, in.Labels()
		w.svc = naming.ServiceKey{Namespace: in.Namespace, Name: in.Service}
	}
	return w
}

// finder is the Source's InstanceAt, or nil.
func (e *Engine) finder() func(netip.AddrPort) *instance.Instance {
	if f, ok := e.src.(AddressFinder); ok {
		return f.InstanceAt
	}
	return nil
}

// chainMemo holds the encoded filter chains of each distinct (mode,
// policies) within one publication: workloads selected by the same
// policies share them, so a policy change builds its RBAC filters once,
// not once per server.
type chainMemo map[string][]byte

// serverListener builds the listener of a request for workload wl with the
// security policies sec.
func (e *Engine) serverListener(key string, r serverReq, wl workload, sec *config.Security, memo chainMemo) xds.Resource {
	mode, policies := sec.MTLSMode(wl.w), append(sec.RequestAuthentications(wl.w), sec.Authorization(wl.w)...)
	res := xds.Resource{Name: r.name, Key: key, Version: e.version(), Hidden: true}
	mk := mode.String()
	for _, o := range policies {
		mk += "\x00" + o.Key.String()
	}
	chains, ok := memo[mk]
	if !ok {
		var err error
		if chains, err = xds.InboundChains(mode, policies); err != nil {
			res.Message = xds.ServerListener(r.name, r.addr, mode, policies) // Apply reports the error
			return res
		}
		if memo != nil {
			memo[mk] = chains
		}
	}
	b, err := xds.ServerListenerBytes(r.name, r.addr, chains)
	if err != nil {
		res.Message = xds.ServerListener(r.name, r.addr, mode, policies)
		return res
	}
	res.Value = b
	return res
}

// security is the security policies in force.
func (e *Engine) security() *config.Security {
	if s := e.sec.Load(); s != nil {
		return s
	}
	return config.NewSecurity(e.opts.RootNamespace, nil)
}

// publishServers rebuilds the server listeners subscribers asked for and
// publishes those that changed: all of them (a policy change), or those
// whose workload changed. A listener whose last resolution recheck reports
// (or that has none) is resolved again with find (nil: the Source's
// InstanceAt); the others keep theirs. Called from the config goroutine.
func (e *Engine) publishServers(origin time.Time, all bool, find func(netip.AddrPort) *instance.Instance, recheck func(workload) bool) {
	reqs, last := e.servers.all()
	if len(reqs) == 0 {
		e.servers.resolved(nil)
		return
	}
	// Listeners of servers gone (no subscriber names them) are dropped, so
	// that servers coming and going at new addresses cost nothing later.
	var gone []string
	for _, k := range e.cache.Unwanted(xds.TypeListener, slices.Collect(maps.Keys(reqs))) {
		if time.Since(reqs[k].at) > time.Duration(serverGrace.Load()) {
			gone = append(gone, k)
			delete(reqs, k)
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		e.servers.drop(gone)
		if _, err := e.cache.Apply(xds.TypeListener, nil, gone, e.version(), origin); err != nil {
			e.log.Error("push: remove server listeners", "error", err)
		}
	}
	keys := slices.Sorted(maps.Keys(reqs))
	set := make([]xds.Resource, 0, len(keys))
	wls := make(map[string]workload, len(keys))
	sec, memo := e.security(), chainMemo{}
	for _, k := range keys {
		wl, ok := last[k]
		rebuild := all || !ok
		if !ok {
			wl = resolve(reqs[k], e.finder())
		} else if recheck != nil && recheck(wl) {
			f := find
			if f == nil {
				f = e.finder()
			}
			if again := resolve(reqs[k], f); !sameWorkload(again, wl) {
				wl, rebuild = again, true
			}
		}
		wls[k] = wl
		if rebuild {
			set = append(set, e.serverListener(k, reqs[k], wl, sec, memo))
		}
	}
	e.servers.resolved(wls)
	if len(set) == 0 {
		return
	}
	if _, err := e.cache.Apply(xds.TypeListener, set, nil, e.version(), origin); err != nil {
		e.log.Error("push: publish server listeners", "error", err)
	}
}

// sameWorkload reports whether a and b select the same policies.
func sameWorkload(a, b workload) bool {
	return a.svc == b.svc && a.w.Namespace == b.w.Namespace && a.w.Port == b.w.Port && a.w.Labels.Equal(b.w.Labels)
}

// addressIndex maps the address of every instance of services (nil: every
// known service) to its instance, so that resolving server listeners again
// is one pass over those services, not one scan of the registry per
// listener.
func (w *configWorker) addressIndex(services map[naming.ServiceKey]bool) func(netip.AddrPort) *instance.Instance {
	idx := map[netip.AddrPort]*instance.Instance{}
	add := func(s naming.ServiceKey) {
		w.e.src.Instances(s, nil, func(in *instance.Instance) {
			if a, err := netip.ParseAddr(in.Host); err == nil && in.Port > 0 && in.Port < 65536 {
				ap := netip.AddrPortFrom(a.Unmap(), uint16(in.Port))
				if _, dup := idx[ap]; !dup {
					idx[ap] = in
				}
			}
		})
	}
	if services == nil {
		for _, s := range w.sorted {
			add(s)
		}
	} else {
		for s := range services {
			add(s)
		}
	}
	return func(ap netip.AddrPort) *instance.Instance {
		return idx[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())]
	}
}

// maxSecurityWait bounds how long a new server listener waits for the
// config worker to take in security changes already committed (it takes
// them within its debounce, DebounceMax at most, plus a round).
const maxSecurityWait = 500 * time.Millisecond

// waitSecurity waits, at most d, until the security policies in force
// reflect the snapshot's and every security change the follower has
// handed on. Called from
// xDS server goroutines when a server listener is first asked for.
func (e *Engine) waitSecurity(d time.Duration) {
	var timer *time.Timer
	for {
		wake := e.secWake.Load()
		// Before Run has taken in the snapshot's policies there are none
		// to read: a server asking that early would get a listener
		// without them (PERMISSIVE, no RBAC), however briefly.
		if e.sec.Load() != nil && e.secAt.Load() >= e.secPending.Load() {
			return
		}
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		}
		select {
		case <-*wake:
		case <-timer.C:
			return
		}
	}
}

// storeSecurity makes sec, reflecting changes up to revision rev, the
// policies in force and wakes the listeners waiting for it.
func (e *Engine) storeSecurity(sec *config.Security, rev int64) {
	e.sec.Store(sec)
	if rev > e.secAt.Load() {
		e.secAt.Store(rev)
	}
	next := make(chan struct{})
	close(*e.secWake.Swap(&next))
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
	w.sidecars(b)
	secChanged := w.securityChanged(b)
	if secChanged {
		rev := int64(0)
		if b.snap != nil {
			rev = b.snap.Revision
		}
		for _, ch := range b.changes {
			rev = max(rev, ch.Revision)
		}
		w.e.storeSecurity(config.NewSecurity(w.e.opts.RootNamespace, slices.Collect(maps.Values(w.sec))), rev)
	}
	if !secChanged && !b.workloads {
		return
	}
	origin := b.origin
	if origin.IsZero() {
		origin = time.Now()
	}
	switch {
	case b.snap != nil:
		// Everything again, from one index of every service.
		w.e.publishServers(origin, true, w.addressIndex(nil), func(workload) bool { return true })
	case len(b.workloadSvcs) > 0:
		// Instance changes: the listeners whose workload is in a changed
		// service, or was not found, are resolved against those services
		// (an instance that appeared is in one of them; one that moved
		// from a service leaves it changed too).
		changed := b.workloadSvcs
		w.e.publishServers(origin, secChanged, w.addressIndex(changed), func(wl workload) bool {
			return changed[wl.svc] || wl.svc == (naming.ServiceKey{})
		})
	default:
		w.e.publishServers(origin, secChanged, nil, nil)
	}
}
