package xds

import (
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	topo "github.com/sextant-mesh/sextant/internal/locality"
)

// Per-subscriber EDS priorities. The push engine publishes one assignment
// per cluster, every locality at priority 0; a subscriber whose node says
// where it runs (Node.locality) is sent a variant with Istio's priorities
// from there (same subzone 0, zone 1, region 2, the rest 3, gaps closed),
// made on first send and remembered per (entry, locality), so Envoy and
// grpc-go fail over zone by zone as Istio's proxies do.

// nodeLocality is the node's locality, zero when it sends none.
func nodeLocality(n *corev3.Node) topo.Locality {
	l := n.GetLocality()
	return topo.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
}

// variantMemo remembers the variants of entries a subscriber's view makes,
// by entry and what the variant depends on; past maxVariants it starts
// again (entries of replaced versions are dropped with it).
type variantMemo[K comparable] struct {
	mu sync.Mutex
	m  map[variantKey[K]]*entry
}

type variantKey[K comparable] struct {
	e *entry
	k K
}

const maxVariants = 4096

func newVariantMemo[K comparable]() *variantMemo[K] {
	return &variantMemo[K]{m: map[variantKey[K]]*entry{}}
}

// of returns the variant of e for k, built once.
func (vm *variantMemo[K]) of(e *entry, k K, build func() *entry) *entry {
	key := variantKey[K]{e, k}
	vm.mu.Lock()
	v, ok := vm.m[key]
	vm.mu.Unlock()
	if ok {
		return v
	}
	v = build()
	vm.mu.Lock()
	if len(vm.m) >= maxVariants {
		clear(vm.m)
	}
	vm.m[key] = v
	vm.mu.Unlock()
	return v
}

// localityVariants: e as a subscriber in a locality gets it, e itself when
// its localities all get one priority (nothing to tell apart) or it cannot
// be read.
var localityVariants = newVariantMemo[topo.Locality]()

func localityVariant(e *entry, loc topo.Locality) *entry {
	if e.rules != nil && e.rules.Off {
		return e
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := proto.Unmarshal(e.value, &cla); err != nil || len(cla.Endpoints) < 2 {
		return e
	}
	locs := make([]topo.Locality, len(cla.Endpoints))
	weights := make([]uint32, len(cla.Endpoints))
	for i, le := range cla.Endpoints {
		if le.GetPriority() != 0 {
			return e // priorities of its own: kept
		}
		l := le.GetLocality()
		locs[i] = topo.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
		weights[i] = le.GetLoadBalancingWeight().GetValue()
	}
	var rules topo.Rules
	if e.rules != nil {
		rules = *e.rules
	}
	// distribute: locality weights instead of priorities (Istio applies
	// one or the other); a locality no rule sends to is left out.
	if w, ok := topo.Weights(loc, locs, weights, rules.Distribute); ok {
		kept := cla.Endpoints[:0]
		for i, le := range cla.Endpoints {
			if w[i] > 0 {
				le.LoadBalancingWeight = wrapperspb.UInt32(w[i])
				kept = append(kept, le)
			}
		}
		cla.Endpoints = kept
	} else {
		prio := topo.Priorities(loc, locs, rules.Failover)
		differ := false
		for i, p := range prio {
			cla.Endpoints[i].Priority = p
			differ = differ || p != 0
		}
		if !differ {
			return e
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&cla)
	if err != nil {
		return e
	}
	// The publisher's version, with the variant's own content hash.
	base := e.version
	if i := strings.LastIndexByte(base, '-'); i >= 0 {
		base = base[:i]
	}
	return newEntry(TypeEndpoint, &Resource{Name: e.name, Version: base, Hidden: e.hidden}, b, e.id, e.seq, e.origin)
}

// view is entry e of type t as s gets it: its flavour's variant, and for
// EDS its locality's.
func (s *subscriber) view(t Type, e *entry) *entry {
	e = s.scoped(t, e.of(s.flavour))
	if e != nil && e.bySource {
		return sourceVariants.of(e, s.source.key, func() *entry { return sourceVariant(e, s.source) })
	}
	if e != nil && t == TypeEndpoint && usesFailoverPriority(e) {
		return failoverVariants.of(e, failoverKey{s.locality, s.source.key}, func() *entry { return failoverVariant(e, s.locality, s.source.labels) })
	}
	if e == nil || t != TypeEndpoint || s.locality == (topo.Locality{}) {
		return e
	}
	return localityVariants.of(e, s.locality, func() *entry { return localityVariant(e, s.locality) })
}
