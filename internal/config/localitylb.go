package config

import (
	"cmp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/locality"
)

// A DestinationRule's loadBalancer.localityLbSetting: the rules of the
// EDS priorities and locality weights each subscriber is sent from its own
// locality (internal/xds/localityeds.go) and, with failoverPriority, its
// labels (the node's LABELS; internal/xds/failoverpriority.go).
func init() {
	allow(&networking.LoadBalancerSettings{}, "locality_lb_setting")
	allow(&networking.LocalityLoadBalancerSetting{}, "distribute", "failover", "enabled", "failover_priority")
	allow(&networking.LocalityLoadBalancerSetting_Distribute{}, "from", "to")
	allow(&networking.LocalityLoadBalancerSetting_Failover{}, "from", "to")
}

func validateLocalityLb(c errs, path string, s *networking.LocalityLoadBalancerSetting) {
	if len(s.GetDistribute()) > 0 && len(s.GetFailover()) > 0 {
		c.add(path, ErrInvalid, "distribute and failover cannot both be set (Istio's rule)")
	}
	for i, d := range s.GetDistribute() {
		p := index(join(path, "distribute"), i)
		if err := locality.CheckPattern(d.GetFrom()); err != nil {
			c.add(join(p, "from"), ErrInvalid, "%v", err)
		}
		var sum uint64
		for to, w := range d.GetTo() {
			if err := locality.CheckPattern(to); err != nil {
				c.add(mapKey(join(p, "to"), to), ErrInvalid, "%v", err)
			}
			sum += uint64(w)
		}
		if sum != 100 {
			c.add(join(p, "to"), ErrInvalid, "weights sum to %d, want 100", sum)
		}
	}
	for i, fp := range s.GetFailoverPriority() {
		p := index(join(path, "failoverPriority"), i)
		k, _, _ := strings.Cut(fp, "=")
		if !label.ValidKey(k) {
			c.add(p, ErrInvalid, "%q: want a label key, or key=value (1..128 of [A-Za-z0-9._/-] before the =)", fp)
		}
		// Istio's rule: the topology labels and failover order the same
		// thing twice.
		if len(s.GetFailover()) > 0 && slices.Contains(topologyLabels, k) {
			c.add(p, ErrInvalid, "%q: cannot be set with failover (Istio's rule: failover already orders by region)", k)
		}
	}
	for i, f := range s.GetFailover() {
		p := index(join(path, "failover"), i)
		switch {
		case f.GetFrom() == "" || strings.ContainsAny(f.GetFrom(), "/*"):
			c.add(join(p, "from"), ErrInvalid, "%q: want a region", f.GetFrom())
		case f.GetTo() == "" || strings.ContainsAny(f.GetTo(), "/*"):
			c.add(join(p, "to"), ErrInvalid, "%q: want a region", f.GetTo())
		case f.GetFrom() == f.GetTo():
			c.add(p, ErrInvalid, "from and to are both %q", f.GetFrom())
		}
	}
}

// localityRules is what s says, nil for Istio's defaults (enabled, no
// rules). A `to` map becomes shares most specific pattern first, so that
// overlapping patterns split the same way every time.
func localityRules(s *networking.LocalityLoadBalancerSetting) *locality.Rules {
	if s == nil {
		return nil
	}
	r := &locality.Rules{Off: s.GetEnabled() != nil && !s.GetEnabled().GetValue()}
	for _, f := range s.GetFailover() {
		r.Failover = append(r.Failover, locality.Failover{From: f.GetFrom(), To: f.GetTo()})
	}
	r.FailoverPriority = slices.Clone(s.GetFailoverPriority())
	for _, d := range s.GetDistribute() {
		ld := locality.Distribute{From: d.GetFrom()}
		for to, w := range d.GetTo() {
			ld.To = append(ld.To, locality.Share{Pattern: to, Weight: w})
		}
		slices.SortFunc(ld.To, func(a, b locality.Share) int {
			return cmp.Or(-cmp.Compare(specificity(a.Pattern), specificity(b.Pattern)), cmp.Compare(a.Pattern, b.Pattern))
		})
		r.Distribute = append(r.Distribute, ld)
	}
	return r
}

// topologyLabels are the labels failoverPriority reads from localities
// (and network), as Istio's.
var topologyLabels = []string{locality.LabelNetwork, locality.LabelRegion, locality.LabelZone, locality.LabelSubZone}

// specificity counts a pattern's named parts.
func specificity(p string) int {
	n := 0
	for _, part := range strings.Split(p, "/") {
		if part != "*" {
			n++
		}
	}
	return n
}
