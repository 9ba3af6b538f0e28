// Package locality owns locality-aware load balancing's arithmetic: the
// priority Istio gives each locality of a cluster as seen from a client's
// own locality (same subzone 0, same zone 1, same region 2, a failover
// region 3, else 4), a DestinationRule's `distribute` weights, and Envoy's
// split of load across priorities by their healthy share with the
// overprovisioning factor. It decides nothing about which hosts are
// healthy or how a host is picked inside a priority: the xDS translator and
// the gateway's balancer do, with these numbers.
package locality

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrInvalid is returned for a malformed locality or pattern.
var ErrInvalid = errors.New("locality: invalid")

// Locality is where a workload runs: Kubernetes' topology.kubernetes.io
// region and zone, and Istio's topology.istio.io/subzone.
type Locality struct {
	Region, Zone, SubZone string
}

// String is "region/zone/subzone", trailing empty parts left out.
func (l Locality) String() string {
	switch {
	case l.SubZone != "":
		return l.Region + "/" + l.Zone + "/" + l.SubZone
	case l.Zone != "":
		return l.Region + "/" + l.Zone
	}
	return l.Region
}

// Parse reads "region", "region/zone" or "region/zone/subzone" (the form of
// `sextant gateway --locality` and of Istio's WorkloadEntry locality). The
// empty string is the zero Locality (unknown).
func Parse(s string) (Locality, error) {
	if s == "" {
		return Locality{}, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) > 3 || slices.Contains(parts, "") {
		return Locality{}, fmt.Errorf("%w: %q: want region, region/zone or region/zone/subzone", ErrInvalid, s)
	}
	for _, p := range parts {
		if p == "*" || strings.ContainsAny(p, " \t\n") {
			return Locality{}, fmt.Errorf("%w: %q: part %q is not a name", ErrInvalid, s, p)
		}
	}
	parts = append(parts, "", "")
	return Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]}, nil
}

// Match reports whether l matches an Istio locality pattern: up to three
// '/'-separated parts, each a name or "*", a shorter pattern matching every
// locality below it ("us-east" matches "us-east/a/1"), as Istio's
// util.LocalityMatch.
func Match(l Locality, pattern string) bool {
	parts := strings.Split(pattern, "/")
	have := [3]string{l.Region, l.Zone, l.SubZone}
	for i, p := range parts {
		if i >= 3 {
			return false
		}
		if p != "*" && p != have[i] {
			return false
		}
	}
	return true
}

// CheckPattern validates a locality pattern of `distribute` (from, to).
func CheckPattern(pattern string) error {
	parts := strings.Split(pattern, "/")
	if len(parts) > 3 || slices.Contains(parts, "") {
		return fmt.Errorf("%w: %q: want up to three parts (region/zone/subzone), each a name or *", ErrInvalid, pattern)
	}
	return nil
}

// Failover is one `localityLbSetting.failover` rule: when a client in
// region From has no healthy endpoint left in its region, traffic goes to
// region To before any other.
type Failover struct{ From, To string }

// Priority is the priority Istio gives a locality l as seen from a client
// in self (istiod's applyLocalityFailover): 0 same region, zone and
// subzone; 1 same region and zone; 2 same region; 3 another region (the
// To of the failover rule whose From is self's region, or any region when
// no rule names self's region); 4 a region no failover rule allows.
func Priority(self, l Locality, failover []Failover) uint32 {
	switch {
	case self.Region != l.Region:
		for _, f := range failover {
			if f.From == self.Region {
				if l.Region != f.To {
					return 4
				}
				break
			}
		}
		return 3
	case self.Zone != l.Zone:
		return 2
	case self.SubZone != l.SubZone:
		return 1
	}
	return 0
}

// Priorities gives each of locs its priority from self, made dense (0..N
// with no gaps, as EDS requires) while keeping their order, as istiod does.
func Priorities(self Locality, locs []Locality, failover []Failover) []uint32 {
	raw := make([]uint32, len(locs))
	for i, l := range locs {
		raw[i] = Priority(self, l, failover)
	}
	levels := slices.Clone(raw)
	slices.Sort(levels)
	levels = slices.Compact(levels)
	for i, p := range raw {
		n, _ := slices.BinarySearch(levels, p)
		raw[i] = uint32(n)
	}
	return raw
}

// Distribute is one `localityLbSetting.distribute` rule: clients in
// localities matching From send To[pattern] percent of their traffic to
// the localities matching pattern.
type Distribute struct {
	From string
	To   []Share
}

// Share is one `to` entry of a Distribute rule.
type Share struct {
	Pattern string
	Weight  uint32 // percent, the To weights of a rule sum to 100
}

// Weights applies the first rule of distribute whose From matches self to
// localities locs with weights w (istiod's applyLocalityWeights): each To
// pattern's weight is split among the localities it matches (first pattern
// first) in proportion to their weights; a locality no pattern matches gets
// weight 0 (its endpoints get no traffic). ok is false when no rule
// matches self: the weights are w unchanged.
func Weights(self Locality, locs []Locality, w []uint32, distribute []Distribute) (out []uint32, ok bool) {
	for _, d := range distribute {
		if !Match(self, d.From) {
			continue
		}
		out = make([]uint32, len(locs))
		taken := make([]bool, len(locs))
		for _, to := range d.To {
			var total uint64
			var idx []int
			for i, l := range locs {
				if !taken[i] && Match(l, to.Pattern) {
					taken[i] = true
					idx = append(idx, i)
					total += uint64(max(w[i], 1))
				}
			}
			for _, i := range idx {
				// Scaled by 1000 so a 1% share split many ways keeps a weight.
				out[i] = uint32(uint64(max(w[i], 1)) * uint64(to.Weight) * 1000 / total)
			}
		}
		return out, true
	}
	return w, false
}

// OverprovisioningFactor is Envoy's default (140): a priority or locality
// with 1/1.4 (~71%) of its hosts healthy still takes its full share.
const OverprovisioningFactor = 1.4

// Level is one priority's host counts, as Envoy counts them.
type Level struct {
	Healthy, Total int
}

// Load splits 100% of the traffic across priority levels as Envoy does
// (LoadBalancerBase::recalculatePerPriorityState): each level's health is
// min(100, 140 * healthy / total); levels take their health in order until
// 100 is reached, normalized when the levels' health sums to less than 100
// (so traffic still all goes somewhere). With no healthy host anywhere,
// all goes to level 0 (Envoy's panic: every host of it tried). The result
// is in percent and sums to 100.
func Load(levels []Level, out []uint32) []uint32 {
	out = slices.Grow(out[:0], len(levels))[:len(levels)]
	clear(out)
	if len(levels) == 0 {
		return out
	}
	health := make([]uint32, len(levels))
	var sum uint32
	for i, l := range levels {
		health[i] = Health(l)
		sum += health[i]
	}
	if sum == 0 {
		out[0] = 100
		return out
	}
	norm := min(sum, 100)
	left := uint32(100)
	first := -1
	for i, h := range health {
		out[i] = min(left, h*100/norm)
		left -= out[i]
		if first < 0 && h > 0 {
			first = i
		}
	}
	// Rounding leftovers go to the first level with health, as Envoy's.
	out[first] += left
	return out
}

// Health is a level's health as Envoy counts it: min(100, 140 * healthy /
// total), 0 for an empty level.
func Health(l Level) uint32 {
	if l.Total <= 0 {
		return 0
	}
	return uint32(min(100, OverprovisioningFactor*100*float64(l.Healthy)/float64(l.Total)))
}

// LevelOf returns the level that r (in [0, 100)) falls in when 100% is
// split as Load splits it over levels of the given health (Health), the
// levels with a bit in skip given none (levels from 64 on are never
// skipped): the priority load of Envoy's previous_priorities retry
// priority, whose skip is the levels a call has tried. ok is false when
// no level left has health; Envoy then keeps the unmodified load. It
// allocates nothing: a retry's pick calls it.
func LevelOf(health []uint32, skip uint64, r uint32) (level int, ok bool) {
	skipped := func(i int) bool { return i < 64 && skip&(1<<i) != 0 }
	var sum uint32
	for i, h := range health {
		if !skipped(i) {
			sum += h
		}
	}
	if sum == 0 {
		return 0, false
	}
	norm := min(sum, 100)
	// The rounding leftover goes to the first level with health, as in
	// Load: its range starts at 0 and is that much longer.
	left := uint32(100)
	for i, h := range health {
		if !skipped(i) {
			left -= min(left, h*100/norm)
		}
	}
	cum, rest := left, uint32(100)
	first := -1
	for i, h := range health {
		if skipped(i) || h == 0 {
			continue
		}
		d := min(rest, h*100/norm)
		rest -= d
		cum += d
		if first < 0 {
			first = i
		}
		if r < cum {
			return i, true
		}
	}
	return first, true
}

// Rules is a DestinationRule's localityLbSetting: Off turns locality
// priorities off (every locality one priority); at most one of Failover
// and Distribute is set. The zero value is Istio's default: on, no rules.
type Rules struct {
	Off        bool
	Failover   []Failover
	Distribute []Distribute
	// FailoverPriority is `failoverPriority`: label keys, each optionally
	// "key=value" (the value to match instead of the client's), ordering
	// endpoints into priorities by how many of them, in order, match the
	// client's (FailoverPriorityOf).
	FailoverPriority []string
}

// Equal reports whether r and o say the same (nil is the zero Rules).
func (r *Rules) Equal(o *Rules) bool {
	var zero Rules
	if r == nil {
		r = &zero
	}
	if o == nil {
		o = &zero
	}
	return r.Off == o.Off && slices.Equal(r.Failover, o.Failover) && slices.Equal(r.FailoverPriority, o.FailoverPriority) &&
		slices.EqualFunc(r.Distribute, o.Distribute, func(a, b Distribute) bool { return a.From == b.From && slices.Equal(a.To, b.To) })
}
