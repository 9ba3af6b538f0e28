package xds

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	topo "github.com/sextant-mesh/sextant/internal/locality"
)

// Per-subscriber EDS priorities by failoverPriority (a DestinationRule's
// localityLbSetting.failoverPriority), as Istio: each endpoint's priority
// is how many of the listed labels, in order, match the subscriber's
// (topology.kubernetes.io/region, zone and topology.istio.io/subzone read
// from localities, the rest from the endpoint's labels and the node's
// LABELS), and with failover the locality priority within each of those.
// The push engine publishes the listed labels' values per endpoint in the
// "sextant.io/failover" filter metadata (LoadAssignmentFor); a subscriber
// gets a variant with the priorities from its own node, without that
// metadata, made once per (entry, locality, labels).

// failoverMetadataKey is the endpoint's filter metadata holding its values
// of the failoverPriority labels.
const failoverMetadataKey = "sextant.io/failover"

// LoadAssignmentFor is LoadAssignment with what rules need of the
// endpoints: with failoverPriority, each endpoint's values of its labels
// (other than the topology ones a locality carries).
func LoadAssignmentFor(cluster string, eps []Endpoint, rules *topo.Rules) *endpointv3.ClusterLoadAssignment {
	cla := LoadAssignment(cluster, eps)
	if rules == nil || len(rules.FailoverPriority) == 0 {
		return cla
	}
	var keys []string
	for _, k := range rules.FailoverPriority {
		k, _, _ = strings.Cut(k, "=")
		if _, ok := topo.Topology(topo.Locality{}, k); !ok && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return cla
	}
	// LoadAssignment sorted eps and kept the first at each address.
	byAddr := make(map[netip.AddrPort]*Endpoint, len(eps))
	for i := range eps {
		if a, err := netip.ParseAddr(eps[i].Host); err == nil {
			ap := netip.AddrPortFrom(a, uint16(eps[i].Port))
			if byAddr[ap] == nil {
				byAddr[ap] = &eps[i]
			}
		}
	}
	for _, le := range cla.Endpoints {
		for _, lb := range le.LbEndpoints {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			a, err := netip.ParseAddr(sa.GetAddress())
			if err != nil {
				continue
			}
			e := byAddr[netip.AddrPortFrom(a, uint16(sa.GetPortValue()))]
			if e == nil {
				continue
			}
			fields := map[string]*structpb.Value{}
			for _, k := range keys {
				if v, ok := e.Metadata.Get(k); ok {
					fields[k] = structpb.NewStringValue(v)
				}
			}
			lb.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{failoverMetadataKey: {Fields: fields}}}
		}
	}
	return cla
}

// failoverKey is what a failoverPriority variant depends on: the node's
// locality and labels (nodeSource.key).
type failoverKey struct {
	loc    topo.Locality
	labels string
}

var failoverVariants = newVariantMemo[failoverKey]()

// usesFailoverPriority reports whether e's priorities follow
// failoverPriority (distribute, when set, wins as in Istio).
func usesFailoverPriority(e *entry) bool {
	return e.rules != nil && !e.rules.Off && len(e.rules.FailoverPriority) > 0 && len(e.rules.Distribute) == 0
}

// failoverVariant is e as a node in loc with labels gets it: each
// locality split by failoverPriority priority (combined with failover's
// locality priority when failover is set: 5 x that + the locality's, as
// istiod), made dense, sorted by priority, without the labels' metadata.
// A node without labels or locality gets every endpoint at priority 0, as
// Istio applies nothing without the proxy's labels.
func failoverVariant(e *entry, loc topo.Locality, labels map[string]string) *entry {
	var cla endpointv3.ClusterLoadAssignment
	if err := proto.Unmarshal(e.value, &cla); err != nil {
		return e
	}
	apply := len(labels) > 0 || loc != (topo.Locality{})
	client := func(k string) string {
		if v, ok := topo.Topology(loc, k); ok && v != "" {
			return v
		}
		return labels[k]
	}
	var out []*endpointv3.LocalityLbEndpoints
	for _, le := range cla.Endpoints {
		l := le.GetLocality()
		own := topo.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
		groups := map[uint32]*endpointv3.LocalityLbEndpoints{}
		var order []uint32
		for _, lb := range le.LbEndpoints {
			md := lb.GetMetadata().GetFilterMetadata()[failoverMetadataKey]
			if md != nil {
				delete(lb.Metadata.FilterMetadata, failoverMetadataKey)
				if len(lb.Metadata.FilterMetadata) == 0 && lb.Metadata.TypedFilterMetadata == nil {
					lb.Metadata = nil
				}
			}
			var p uint32
			if apply {
				p = topo.FailoverPriority(e.rules.FailoverPriority, client, func(k string) string {
					if v, ok := topo.Topology(own, k); ok {
						return v
					}
					return md.GetFields()[k].GetStringValue()
				})
				if len(e.rules.Failover) > 0 {
					p = p*5 + topo.Priority(loc, own, e.rules.Failover)
				}
			}
			g := groups[p]
			if g == nil {
				g = &endpointv3.LocalityLbEndpoints{Locality: le.Locality, Priority: p}
				groups[p] = g
				order = append(order, p)
			}
			g.LbEndpoints = append(g.LbEndpoints, lb)
		}
		for _, p := range order {
			g := groups[p]
			var w uint64
			for _, lb := range g.LbEndpoints {
				w += uint64(max(lb.GetLoadBalancingWeight().GetValue(), 1))
			}
			g.LoadBalancingWeight = wrapperspb.UInt32(uint32(min(w, 1<<31)))
			out = append(out, g)
		}
	}
	// Dense priorities (EDS requires 0..N), order kept.
	levels := make([]uint32, 0, len(out))
	for _, le := range out {
		levels = append(levels, le.Priority)
	}
	slices.Sort(levels)
	levels = slices.Compact(levels)
	for _, le := range out {
		n, _ := slices.BinarySearch(levels, le.Priority)
		le.Priority = uint32(n)
	}
	slices.SortStableFunc(out, func(a, b *endpointv3.LocalityLbEndpoints) int { return cmp.Compare(a.Priority, b.Priority) })
	cla.Endpoints = out
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&cla)
	if err != nil {
		return e
	}
	base := e.version
	if i := strings.LastIndexByte(base, '-'); i >= 0 {
		base = base[:i]
	}
	return newEntry(TypeEndpoint, &Resource{Name: e.name, Version: base, Hidden: e.hidden}, b, e.id, e.seq, e.origin)
}
