package config

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sextant-mesh/sextant/internal/naming"
	networking "istio.io/api/networking/v1"
)

// Index holds every config object and answers, per registry service, the
// rules that apply to it without scanning: host -> VirtualServices, host ->
// DestinationRules, and destination -> VirtualServices that route there. A
// change returns the services it touches, so that only those are
// recomputed (seed 001 scanned services x rules on every push).
//
// When several objects of one kind name the same service, the first in
// (namespace, name) order is in force and the others are shadowed (Warnings
// says so at apply time). An Index is not safe for concurrent use: one
// goroutine (the push engine's config worker) owns it.
type Index struct {
	objects map[Key]*Object
	derived map[Key]derived             // hosts and destinations resolved once per object
	vs      map[naming.ServiceKey][]Key // VirtualServices naming the host, sorted
	dr      map[naming.ServiceKey][]Key // DestinationRules naming the host, sorted
	se      map[naming.ServiceKey][]Key // ServiceEntries naming the host, sorted
	dest    map[naming.ServiceKey]map[Key]bool
	// whole counts, per service, the VirtualServices bound to Gateways
	// only that route to the whole service (a cluster the mesh's routes may
	// not name, which the push engine must publish for the gateways).
	whole map[naming.ServiceKey]map[Key]bool
	// roots maps a delegate VirtualService's key to the roots whose
	// routes delegate to it (present or not), re-merged when it changes.
	roots map[Key]map[Key]bool
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{
		objects: map[Key]*Object{},
		derived: map[Key]derived{},
		vs:      map[naming.ServiceKey][]Key{},
		dr:      map[naming.ServiceKey][]Key{},
		se:      map[naming.ServiceKey][]Key{},
		dest:    map[naming.ServiceKey]map[Key]bool{},
		whole:   map[naming.ServiceKey]map[Key]bool{},
		roots:   map[Key]map[Key]bool{},
	}
}

// Len is the number of objects.
func (ix *Index) Len() int { return len(ix.objects) }

// Get returns the object under k, or nil.
func (ix *Index) Get(k Key) *Object { return ix.objects[k] }

// All returns every object in key order.
func (ix *Index) All() []*Object {
	keys := slices.SortedFunc(maps.Keys(ix.objects), Key.Compare)
	out := make([]*Object, len(keys))
	for i, k := range keys {
		out[i] = ix.objects[k]
	}
	return out
}

type derived struct {
	hosts []naming.ServiceKey
	dests []Destination
	// gateway are the services a VirtualService of Gateways only routes to
	// as a whole (gatewayWhole).
	gateway []naming.ServiceKey
	// merged is a root VirtualService with its delegates' routes merged
	// in (MergeDelegates); nil when it has no delegate routes.
	merged *Object
}

// derive resolves o's hosts and destinations, a root VirtualService's
// from its routes merged with its delegates' as the index holds them now.
func (ix *Index) derive(o *Object) derived {
	m, _ := MergeDelegates(o, ix.Get)
	d := derived{hosts: Hosts(o), dests: Destinations(m), gateway: gatewayWhole(m)}
	if m != o {
		d.merged = m
	}
	return d
}

// gatewayWhole returns the services a VirtualService bound to Gateways
// only routes to as a whole (no subset): its routes name those services'
// own clusters, which the mesh's routes may not.
func gatewayWhole(o *Object) []naming.ServiceKey {
	if o == nil || o.VirtualService == nil || InMesh(o.VirtualService) {
		return nil
	}
	var out []naming.ServiceKey
	for _, d := range VirtualServiceDestinations(o) {
		if d.Subset == "" && !slices.Contains(out, d.Service) {
			out = append(out, d.Service)
		}
	}
	return out
}

// GatewayRoutesToWhole reports whether a VirtualService bound to Gateways
// only routes to service s as a whole.
func (ix *Index) GatewayRoutesToWhole(s naming.ServiceKey) bool { return len(ix.whole[s]) > 0 }

func (ix *Index) hosts(o *Object) []naming.ServiceKey {
	if d, ok := ix.derived[o.Key]; ok && ix.objects[o.Key] == o {
		return d.hosts
	}
	return Hosts(o)
}

func (ix *Index) gatewayOf(o *Object) []naming.ServiceKey {
	if d, ok := ix.derived[o.Key]; ok && ix.objects[o.Key] == o {
		return d.gateway
	}
	return gatewayWhole(o)
}

func (ix *Index) dests(o *Object) []Destination {
	if d, ok := ix.derived[o.Key]; ok && ix.objects[o.Key] == o {
		return d.dests
	}
	return Destinations(o)
}

// Hosts returns the services o names as hosts: a VirtualService's hosts, a
// DestinationRule's host, a ServiceEntry's hosts. Unresolvable hosts (never
// in a validated object) are skipped.
func Hosts(o *Object) []naming.ServiceKey {
	if o == nil {
		return nil
	}
	if o.ServiceEntry != nil {
		return EntryHosts(o)
	}
	if o.DestinationRule != nil {
		k, err := ResolveHost(o.DestinationRule.Host, o.Namespace)
		if err != nil {
			return nil
		}
		return []naming.ServiceKey{k}
	}
	if o.VirtualService == nil || !InMesh(o.VirtualService) {
		return nil // a Gateway, or a VirtualService of gateways only: no service's routes
	}
	out := make([]naming.ServiceKey, 0, len(o.VirtualService.Hosts))
	for _, h := range o.VirtualService.Hosts {
		if k, err := ResolveHost(h, o.Namespace); err == nil {
			out = append(out, k)
		}
	}
	return out
}

// Destination is one place a VirtualService sends traffic.
type Destination struct {
	Service naming.ServiceKey
	Subset  string // "" for the whole service
	Port    uint32 // 0 for any port
}

// Destinations returns the distinct destinations of a VirtualService, in
// the order its routes name them.
func Destinations(o *Object) []Destination {
	if o == nil || o.VirtualService == nil || !InMesh(o.VirtualService) {
		return nil
	}
	return VirtualServiceDestinations(o)
}

// VirtualServiceDestinations is Destinations whatever gateways the
// VirtualService is bound to.
func VirtualServiceDestinations(o *Object) []Destination {
	var out []Destination
	seen := map[Destination]bool{}
	add := func(d *networking.Destination) {
		k, err := ResolveHost(d.GetHost(), o.Namespace)
		if err != nil {
			return
		}
		dst := Destination{Service: k, Subset: d.GetSubset(), Port: d.GetPort().GetNumber()}
		if !seen[dst] {
			seen[dst] = true
			out = append(out, dst)
		}
	}
	for _, r := range o.VirtualService.Http {
		for _, d := range r.Route {
			add(d.GetDestination())
		}
		// A mirror's cluster is published as a route's is.
		if r.Mirror != nil {
			add(r.Mirror)
		}
		for _, m := range r.Mirrors {
			add(m.GetDestination())
		}
	}
	for _, r := range o.VirtualService.Tls {
		for _, d := range r.Route {
			add(d.GetDestination())
		}
	}
	for _, r := range o.VirtualService.Tcp {
		for _, d := range r.Route {
			add(d.GetDestination())
		}
	}
	return out
}

// Put adds or replaces o and returns the services whose routes or clusters
// may have changed: the hosts and destinations of the old and new versions,
// and for a DestinationRule the services whose routes name its subsets.
func (ix *Index) Put(o *Object) []naming.ServiceKey {
	old := ix.objects[o.Key]
	touched := ix.touched(old)
	if old != nil {
		ix.unlink(old)
	}
	ix.objects[o.Key] = o
	ix.derived[o.Key] = ix.derive(o)
	ix.link(o)
	touched = append(touched, ix.touched(o)...)
	return dedupe(append(touched, ix.remerge(o.Key)...))
}

// remerge derives again the roots delegating to k (after k changed) and
// returns the services they touched before and after.
func (ix *Index) remerge(k Key) []naming.ServiceKey {
	var out []naming.ServiceKey
	for rk := range ix.roots[k] {
		r := ix.objects[rk]
		if r == nil || rk == k {
			continue
		}
		out = append(out, ix.touched(r)...)
		ix.unlink(r)
		ix.derived[rk] = ix.derive(r)
		ix.link(r)
		out = append(out, ix.touched(r)...)
	}
	return out
}

// Delete removes the object under k and returns the services it touched,
// or nil if there was none.
func (ix *Index) Delete(k Key) []naming.ServiceKey {
	old := ix.objects[k]
	if old == nil {
		return nil
	}
	touched := ix.touched(old)
	ix.unlink(old)
	delete(ix.objects, k)
	delete(ix.derived, k)
	return dedupe(append(touched, ix.remerge(k)...))
}

func (ix *Index) touched(o *Object) []naming.ServiceKey {
	if o == nil {
		return nil
	}
	out := ix.hosts(o)
	if o.VirtualService != nil {
		for _, d := range ix.dests(o) {
			out = append(out, d.Service)
		}
		return append(out, ix.gatewayOf(o)...)
	}
	for _, h := range ix.hosts(o) {
		out = append(out, ix.RoutesTo(h)...)
	}
	return out
}

// byHost is the host map of o's kind.
func (ix *Index) byHost(o *Object) map[naming.ServiceKey][]Key {
	switch {
	case o.VirtualService != nil:
		return ix.vs
	case o.ServiceEntry != nil:
		return ix.se
	}
	return ix.dr
}

func (ix *Index) link(o *Object) {
	byHost := ix.byHost(o)
	if o.VirtualService != nil {
		for _, d := range ix.dests(o) {
			set := ix.dest[d.Service]
			if set == nil {
				set = map[Key]bool{}
				ix.dest[d.Service] = set
			}
			set[o.Key] = true
		}
		for _, s := range ix.gatewayOf(o) {
			set := ix.whole[s]
			if set == nil {
				set = map[Key]bool{}
				ix.whole[s] = set
			}
			set[o.Key] = true
		}
		for _, d := range Delegates(o) {
			set := ix.roots[d]
			if set == nil {
				set = map[Key]bool{}
				ix.roots[d] = set
			}
			set[o.Key] = true
		}
	}
	for _, h := range ix.hosts(o) {
		keys := byHost[h]
		i, _ := slices.BinarySearchFunc(keys, o.Key, Key.Compare)
		byHost[h] = slices.Insert(keys, i, o.Key)
	}
}

func (ix *Index) unlink(o *Object) {
	byHost := ix.byHost(o)
	if o.VirtualService != nil {
		for _, d := range ix.dests(o) {
			if set := ix.dest[d.Service]; set != nil {
				delete(set, o.Key)
				if len(set) == 0 {
					delete(ix.dest, d.Service)
				}
			}
		}
		for _, s := range ix.gatewayOf(o) {
			if set := ix.whole[s]; set != nil {
				delete(set, o.Key)
				if len(set) == 0 {
					delete(ix.whole, s)
				}
			}
		}
		for _, d := range Delegates(o) {
			if set := ix.roots[d]; set != nil {
				delete(set, o.Key)
				if len(set) == 0 {
					delete(ix.roots, d)
				}
			}
		}
	}
	for _, h := range ix.hosts(o) {
		keys := byHost[h]
		if i, ok := slices.BinarySearchFunc(keys, o.Key, Key.Compare); ok {
			keys = slices.Delete(keys, i, i+1)
		}
		if len(keys) == 0 {
			delete(byHost, h)
		} else {
			byHost[h] = keys
		}
	}
}

// VirtualService returns the VirtualService in force for s, or nil. A
// root's delegate routes are replaced by its delegates' routes, merged
// (MergeDelegates).
func (ix *Index) VirtualService(s naming.ServiceKey) *Object {
	if keys := ix.vs[s]; len(keys) > 0 {
		if m := ix.derived[keys[0]].merged; m != nil {
			return m
		}
		return ix.objects[keys[0]]
	}
	return nil
}

// inForce reports whether VirtualService k is the one in force for h.
func (ix *Index) inForce(h naming.ServiceKey, k Key) bool {
	keys := ix.vs[h]
	return len(keys) > 0 && keys[0] == k
}

// DestinationRule returns the DestinationRule in force for s, or nil.
func (ix *Index) DestinationRule(s naming.ServiceKey) *Object {
	if keys := ix.dr[s]; len(keys) > 0 {
		return ix.objects[keys[0]]
	}
	return nil
}

// ServiceEntry returns the ServiceEntry in force for s, or nil.
func (ix *Index) ServiceEntry(s naming.ServiceKey) *Object {
	if keys := ix.se[s]; len(keys) > 0 {
		return ix.objects[keys[0]]
	}
	return nil
}

// Entry returns what the ServiceEntry in force for s gives it, or nil.
func (ix *Index) Entry(s naming.ServiceKey) *EntryService {
	if o := ix.ServiceEntry(s); o != nil {
		return EntryFor(o, s)
	}
	return nil
}

// RoutesTo returns the hosts whose VirtualService in force sends traffic to
// s, sorted.
func (ix *Index) RoutesTo(s naming.ServiceKey) []naming.ServiceKey {
	var out []naming.ServiceKey
	for k := range ix.dest[s] {
		o := ix.objects[k]
		for _, h := range ix.hosts(o) {
			if ix.inForce(h, k) {
				out = append(out, h)
			}
		}
	}
	return dedupe(out)
}

// DestinationsOf returns the distinct destinations in s named by the
// VirtualServices in force (for any host), sorted by subset then port.
func (ix *Index) DestinationsOf(s naming.ServiceKey) []Destination {
	var out []Destination
	seen := map[Destination]bool{}
	for k := range ix.dest[s] {
		o := ix.objects[k]
		inForce := false
		for _, h := range ix.hosts(o) {
			if ix.inForce(h, k) {
				inForce = true
				break
			}
		}
		if !inForce {
			continue
		}
		for _, d := range ix.dests(o) {
			if d.Service == s && !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	slices.SortFunc(out, func(a, b Destination) int {
		if a.Subset != b.Subset {
			if a.Subset < b.Subset {
				return -1
			}
			return 1
		}
		return int(a.Port) - int(b.Port)
	})
	return out
}

// Services returns every service some object names as a host or
// destination, sorted.
func (ix *Index) Services() []naming.ServiceKey {
	var out []naming.ServiceKey
	for k := range ix.vs {
		out = append(out, k)
	}
	for k := range ix.dr {
		out = append(out, k)
	}
	for k := range ix.se {
		out = append(out, k)
	}
	for k := range ix.dest {
		out = append(out, k)
	}
	return dedupe(out)
}

// Warnings says what applying o would leave surprising, without refusing
// it: hosts where another object of its kind is in force (o is shadowed) or
// that o would shadow, and routes to subsets no DestinationRule defines yet
// (the subset may be created next; until then the route falls through, see
// docs/controlplane.md). Call it before Put; o need not be in the index.
// Objects in also (applied together with o) count as in force for subsets.
func (ix *Index) Warnings(o *Object, also ...*Object) []string {
	var out []string
	byHost := ix.byHost(o)
	for _, h := range ix.hosts(o) {
		for _, k := range byHost[h] {
			if k == o.Key {
				continue
			}
			if k.Compare(o.Key) < 0 {
				out = append(out, fmt.Sprintf("%s is shadowed for host %s by %s, which is in force", o.Key, h, k))
			} else {
				out = append(out, fmt.Sprintf("%s shadows %s for host %s", o.Key, k, h))
			}
			break
		}
	}
	if o.VirtualService != nil {
		out = append(out, ix.delegateWarnings(o, also)...)
		for i, r := range o.VirtualService.Http {
			for j, d := range r.Route {
				if d.GetDestination().GetSubset() == "" {
					continue
				}
				k, err := ResolveHost(d.Destination.Host, o.Namespace)
				if err != nil {
					continue
				}
				if !HasSubset(ix.DestinationRule(k), d.Destination.Subset) && !alsoHasSubset(also, k, d.Destination.Subset) {
					out = append(out, fmt.Sprintf("spec.http[%d].route[%d].destination.subset: no DestinationRule defines subset %q of %s yet", i, j, d.Destination.Subset, k))
				}
			}
		}
	}
	return out
}

// delegateWarnings says which routes of o's delegates (o a root), or of
// the roots delegating to o (o a delegate), would be left out once o is
// applied, and why (MergeDelegates), with the objects of also applied too.
func (ix *Index) delegateWarnings(o *Object, also []*Object) []string {
	get := func(k Key) *Object {
		if k == o.Key {
			return o
		}
		for _, a := range also {
			if a.Key == k {
				return a
			}
		}
		return ix.objects[k]
	}
	_, out := MergeDelegates(o, get)
	for _, rk := range slices.SortedFunc(maps.Keys(ix.roots[o.Key]), Key.Compare) {
		if r := get(rk); r != nil && rk != o.Key {
			_, notes := MergeDelegates(r, get)
			for _, n := range notes {
				out = append(out, rk.String()+": "+n)
			}
		}
	}
	return out
}

func alsoHasSubset(objs []*Object, k naming.ServiceKey, subset string) bool {
	for _, o := range objs {
		if o.DestinationRule == nil || !HasSubset(o, subset) {
			continue
		}
		if h, err := ResolveHost(o.DestinationRule.Host, o.Namespace); err == nil && h == k {
			return true
		}
	}
	return false
}

// HasSubset reports whether the DestinationRule dr defines subset name.
func HasSubset(dr *Object, name string) bool {
	if dr == nil {
		return false
	}
	for _, s := range dr.DestinationRule.Subsets {
		if s.Name == name {
			return true
		}
	}
	return false
}

func dedupe(keys []naming.ServiceKey) []naming.ServiceKey {
	slices.SortFunc(keys, naming.ServiceKey.Compare)
	return slices.Compact(keys)
}
