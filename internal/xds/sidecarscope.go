package xds

import (
	"strconv"
	"strings"
	"sync"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// Sidecar scoping (Istio's Sidecar kind, config.Sidecars). A subscriber
// whose node (metadata NAMESPACE and LABELS, as for routes by source) a
// Sidecar applies to is sent only what it imports: the clusters and
// endpoint sets of imported services, their route configurations and
// api_listeners (grpc-go), and the proxy's route configuration (ProxyName)
// with only their virtual hosts. A change to a service it does not import
// does not wake it (notify). With outboundTrafficPolicy REGISTRY_ONLY the
// proxy's routes end with Istio's block_all virtual host, answering 502 as
// Envoy does for Istio's BlackHoleCluster; with ALLOW_ANY a service it does
// not import stays reachable as through Istio's PassthroughCluster: its
// virtual host routes every call to its whole-service cluster, without its
// VirtualService's rules.

// BlockAllName names the virtual host that refuses what a REGISTRY_ONLY
// Sidecar does not import (Istio's name).
const BlockAllName = "block_all"

// sidecarState is the Sidecars in force, for the cache.
type sidecarState struct {
	mu   sync.Mutex
	view *config.Sidecars
	// full memoises each scope's state-of-the-world clusters by flavour,
	// for the cache generation it was built at; reset with the view.
	full map[scopedFullKey]*fullBody
}

type scopedFullKey struct {
	scope *config.SidecarScope
	f     Flavour
}

// scopedRoutes: the proxy's route configuration as a scope trims it.
var scopedRoutes = newVariantMemo[*config.SidecarScope]()

// SetSidecars replaces the Sidecars in force (v is not to be used
// elsewhere: it takes the scopes of the last view's unchanged Sidecars)
// and rescopes every subscriber: one whose scope changed is sent its resources again (a delta
// client is told which it no longer has). Called by the push engine's
// config worker; it does not wait for subscribers.
func (c *Cache) SetSidecars(v *config.Sidecars) {
	c.side.mu.Lock()
	if v != nil {
		v.Carry(c.side.view) // unchanged Sidecars keep their scopes
	}
	c.side.view = v
	c.side.full = nil
	c.side.mu.Unlock()
	for _, s := range *c.subs.Load() {
		s.rescope()
	}
}

func (c *Cache) sidecars() *config.Sidecars {
	c.side.mu.Lock()
	defer c.side.mu.Unlock()
	return c.side.view
}

// rescope sets s's scope from the Sidecars in force, and if it changed
// marks every type it subscribes to for sending again. Both SetSidecars
// (after storing the view) and a new stream (after joining the cache)
// call it, so the last call sees the newest view.
func (s *subscriber) rescope() {
	v := s.c.sidecars()
	w := config.Workload{Namespace: s.ns, Labels: label.FromMap(s.source.labels)}
	s.mu.Lock()
	sc := v.For(w)
	if in, ok := ParseIstioNodeID(s.node); ok && in.Type == "router" {
		sc = nil // Istio applies no Sidecar to a gateway
	}
	changed := sc != s.scope
	s.scope, s.sidecars = sc, v
	if !changed {
		s.mu.Unlock()
		return
	}
	s.proxyHash = 0
	for t := range s.t {
		st := &s.t[t]
		if !st.requested {
			continue
		}
		tc := s.c.types[t]
		if st.wildcard {
			tc.markVisible(&st.pending)
		}
		st.pending.InPlaceUnion(&st.subs)
		for id, seq := range st.sent {
			if seq != 0 {
				st.pending.Set(uint(id))
			}
		}
		if Type(t) == TypeCluster || Type(t) == TypeListener {
			st.full = true
			if Type(t) == TypeCluster {
				st.unsentFrom = 1
			}
		}
		st.dirty = true
	}
	s.mu.Unlock()
	s.poke()
}

// admits reports whether s, scoped, may be sent resource name of type t
// (any version of it). Called with s.mu held.
func (s *subscriber) admits(t Type, name string) bool {
	sc := s.scope
	if sc == nil {
		return true
	}
	switch t {
	case TypeCluster, TypeEndpoint:
		svc, subset, ok := clusterService(name)
		if !ok {
			return true
		}
		k, ok := serviceKey(svc)
		if !ok {
			return true
		}
		port := clusterPort(name)
		if sc.Imports(k, s.sidecars.Namespace(k), port) {
			return true
		}
		// ALLOW_ANY: the whole-service cluster carries passthrough calls.
		return !sc.RegistryOnly() && subset == "" && port == 0
	case TypeRoute:
		if name == ProxyName {
			return true
		}
		k, ok := serviceKey(name)
		return !ok || sc.Imports(k, s.sidecars.Namespace(k), 0)
	case TypeListener:
		if _, ok := ParseServerListener(name); ok || name == ProxyName {
			return true
		}
		host := name
		port := uint32(0)
		if i := strings.LastIndexByte(host, ':'); i >= 0 {
			if p, err := strconv.ParseUint(host[i+1:], 10, 16); err == nil {
				host, port = host[:i], uint32(p)
			}
		}
		k, err := config.ResolveHost(host, s.ns)
		return err != nil || sc.Imports(k, s.sidecars.Namespace(k), port)
	}
	return true
}

// scoped is e as s's scope has it: nil when not imported, the proxy's
// route configuration trimmed. Called with s.mu held.
func (s *subscriber) scoped(t Type, e *entry) *entry {
	if s.scope == nil || e == nil {
		return e
	}
	if !s.admits(t, e.name) {
		return nil
	}
	if t == TypeRoute && e.name == ProxyName {
		sc, v := s.scope, s.sidecars
		e = scopedRoutes.of(e, sc, func() *entry { return scopeProxyRoutes(e, sc, v) })
		s.proxyHash = e.hash
	}
	return e
}

// sameScoped reports whether change ch leaves s's scoped proxy route
// configuration as last built: a change to services s does not import
// then sends it nothing. Called with s.mu held.
func (s *subscriber) sameScoped(t Type, ch change) bool {
	if s.scope == nil || t != TypeRoute || ch.name != ProxyName || s.proxyHash == 0 {
		return false
	}
	tc := s.c.types[t]
	tc.mu.RLock()
	var e *entry
	if int(ch.id) < len(tc.entries) {
		e = tc.entries[ch.id]
	}
	tc.mu.RUnlock()
	prev := s.proxyHash
	v := s.scoped(t, e.of(s.flavour))
	return v != nil && v.hash == prev
}

// fullBody is the state-of-the-world list of type t s gets: the shared
// one, or for a scoped subscriber's clusters the scope's (built once per
// scope, flavour and generation). Called with s.mu held and tc.mu
// read-locked.
func (s *subscriber) fullBody(tc *typeCache) *fullBody {
	if s.scope == nil || tc.typ != TypeCluster {
		return tc.full(s.flavour)
	}
	side := &s.c.side
	key := scopedFullKey{s.scope, s.flavour}
	side.mu.Lock()
	m := side.full[key]
	side.mu.Unlock()
	if m != nil && m.gen == tc.gen {
		return m
	}
	m = &fullBody{gen: tc.gen, version: tc.version}
	for _, e := range tc.entries {
		if e != nil && !e.hidden && s.admits(tc.typ, e.name) {
			m.body = append(m.body, e.of(s.flavour).anyField...)
			m.count++
		}
	}
	side.mu.Lock()
	if side.full == nil {
		side.full = map[scopedFullKey]*fullBody{}
	}
	if s.sidecars == side.view { // not a scope of a replaced view
		side.full[key] = m
	}
	side.mu.Unlock()
	return m
}

// serviceKey parses "namespace/name".
func serviceKey(s string) (naming.ServiceKey, bool) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || !naming.ValidName(ns) || !naming.ValidName(name) {
		return naming.ServiceKey{}, false
	}
	return naming.ServiceKey{Namespace: ns, Name: name}, true
}

// clusterPort is the port a cluster name is restricted to (0: none).
func clusterPort(name string) uint32 {
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return 0
	}
	p, err := strconv.ParseUint(name[i+1:], 10, 16)
	if err != nil {
		return 0
	}
	return uint32(p)
}

// scopeProxyRoutes trims the proxy's route configuration e to scope sc:
// the virtual hosts of imported services as they are; the others left out
// (REGISTRY_ONLY, which then ends with block_all) or reduced to one route
// to the service's whole cluster (ALLOW_ANY: passthrough).
func scopeProxyRoutes(e *entry, sc *config.SidecarScope, v *config.Sidecars) *entry {
	b := e.value
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return e
		}
		field := b[:n+m]
		b = b[n+m:]
		if num != 2 || typ != protowire.BytesType { // RouteConfiguration.virtual_hosts
			out = append(out, field...)
			continue
		}
		vh, _ := protowire.ConsumeBytes(field[n:])
		k, ok := serviceKey(vhostName(vh))
		if !ok || sc.Imports(k, v.Namespace(k), 0) {
			out = append(out, field...)
			continue
		}
		if sc.RegistryOnly() {
			continue
		}
		pass, err := passthroughVhost(vh, k)
		if err != nil {
			return e
		}
		out = protowire.AppendTag(out, 2, protowire.BytesType)
		out = protowire.AppendBytes(out, pass)
	}
	if sc.RegistryOnly() {
		blk, err := proto.MarshalOptions{Deterministic: true}.Marshal(blockAll())
		if err != nil {
			return e
		}
		out = protowire.AppendTag(out, 2, protowire.BytesType)
		out = protowire.AppendBytes(out, blk)
	}
	base := e.version
	if i := strings.LastIndexByte(base, '-'); i >= 0 {
		base = base[:i]
	}
	return newEntry(TypeRoute, &Resource{Name: e.name, Version: base, Hidden: e.hidden}, out, e.id, e.seq, e.origin)
}

// vhostName reads an encoded VirtualHost's name (field 1).
func vhostName(vh []byte) string {
	for len(vh) > 0 {
		num, typ, n := protowire.ConsumeTag(vh)
		if n < 0 {
			return ""
		}
		if num == 1 && typ == protowire.BytesType {
			s, m := protowire.ConsumeString(vh[n:])
			if m < 0 {
				return ""
			}
			return s
		}
		m := protowire.ConsumeFieldValue(num, typ, vh[n:])
		if m < 0 {
			return ""
		}
		vh = vh[n+m:]
	}
	return ""
}

// passthroughVhost is virtual host vh with one route, every path to k's
// whole-service cluster.
func passthroughVhost(vh []byte, k naming.ServiceKey) ([]byte, error) {
	var v routev3.VirtualHost
	if err := proto.Unmarshal(vh, &v); err != nil {
		return nil, err
	}
	p := &routev3.VirtualHost{Name: v.Name, Domains: v.Domains, Routes: []*routev3.Route{{
		Name:  "passthrough",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: ClusterName(k, "", 0)},
		}},
	}}}
	return proto.MarshalOptions{Deterministic: true}.Marshal(p)
}

// blockAll is Istio's block_all virtual host: every host no other virtual
// host names answers 502, as Envoy answers a call routed to Istio's
// BlackHoleCluster.
func blockAll() *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: BlockAllName, Domains: []string{"*"}, Routes: []*routev3.Route{{
		Name:  BlockAllName,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: 502,
		}},
	}}}
}
