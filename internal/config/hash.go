package config

import (
	"time"

	networking "istio.io/api/networking/v1"
)

// The consistent-hash policies (Istio's loadBalancer.consistentHash), as
// internal/balancer names them.
const (
	PolicyRingHash = "ring_hash"
	PolicyMaglev   = "maglev"
)

// Bounds of a ring's and a Maglev table's size, Envoy's (RingHashLbConfig,
// MaglevLbConfig): a value outside them makes Envoy reject the cluster.
const (
	maxRingSize        = 8 << 20
	maxMaglevTableSize = 5000011
)

// HashKey is what a consistent-hash policy hashes of each call: exactly one
// of its fields is set (the zero value: none). It is a value, so that
// policies compare with ==.
type HashKey struct {
	Header     string        // httpHeaderName
	Cookie     string        // httpCookie.name
	CookiePath string        // httpCookie.path
	CookieTTL  time.Duration // httpCookie.ttl: with a TTL, a call without the cookie gets one
	SourceIP   bool          // useSourceIp
	Query      string        // httpQueryParameterName
}

// IsZero reports whether k hashes nothing.
func (k HashKey) IsZero() bool { return k == HashKey{} }

func init() {
	allow(&networking.LoadBalancerSettings{}, "consistent_hash")
	allow(&networking.LoadBalancerSettings_ConsistentHashLB{}, "http_header_name", "http_cookie", "use_source_ip",
		"http_query_parameter_name", "ring_hash", "maglev", "minimum_ring_size")
	allow(&networking.LoadBalancerSettings_ConsistentHashLB_HTTPCookie{}, "name", "path", "ttl")
	allow(&networking.LoadBalancerSettings_ConsistentHashLB_RingHash{}, "minimum_ring_size")
	allow(&networking.LoadBalancerSettings_ConsistentHashLB_MagLev{}, "table_size")
}

// hashPolicy fills p's consistent-hash fields from ch (validated).
func hashPolicy(p *Policy, ch *networking.LoadBalancerSettings_ConsistentHashLB) {
	p.LoadBalancer = PolicyRingHash
	p.RingSize = ch.GetMinimumRingSize()
	switch a := ch.GetHashAlgorithm().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_RingHash_:
		p.RingSize = a.RingHash.GetMinimumRingSize()
	case *networking.LoadBalancerSettings_ConsistentHashLB_Maglev:
		p.LoadBalancer = PolicyMaglev
		p.RingSize = a.Maglev.GetTableSize()
	}
	switch k := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		p.Hash.Header = k.HttpHeaderName
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		p.Hash.Cookie = k.HttpCookie.GetName()
		p.Hash.CookiePath = k.HttpCookie.GetPath()
		p.Hash.CookieTTL = k.HttpCookie.GetTtl().AsDuration()
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		p.Hash.SourceIP = k.UseSourceIp
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		p.Hash.Query = k.HttpQueryParameterName
	}
}

// validateHash checks a loadBalancer.consistentHash at path.
func validateHash(c errs, path string, ch *networking.LoadBalancerSettings_ConsistentHashLB) {
	switch k := ch.GetHashKey().(type) {
	case nil:
		c.add(path, ErrInvalid, "one of httpHeaderName, httpCookie, useSourceIp, httpQueryParameterName is required")
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		if !validHeaderName(k.HttpHeaderName) {
			c.add(join(path, "httpHeaderName"), ErrInvalid, "%q is not a header name", k.HttpHeaderName)
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		hc := k.HttpCookie
		if !validHeaderName(hc.GetName()) {
			c.add(join(path, "httpCookie.name"), ErrInvalid, "%q is not a cookie name", hc.GetName())
		}
		if hc.GetTtl() != nil {
			validateDuration(c, join(path, "httpCookie.ttl"), hc.GetTtl(), false)
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		if !k.UseSourceIp {
			c.add(join(path, "useSourceIp"), ErrInvalid, "false hashes nothing: set true, or another key")
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		if k.HttpQueryParameterName == "" {
			c.add(join(path, "httpQueryParameterName"), ErrInvalid, "empty")
		}
	}
	switch a := ch.GetHashAlgorithm().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_RingHash_:
		if ch.GetMinimumRingSize() != 0 {
			c.add(join(path, "minimumRingSize"), ErrInvalid, "may not be set together with ringHash (its minimumRingSize replaces it)")
		}
		if n := a.RingHash.GetMinimumRingSize(); n > maxRingSize {
			c.add(join(path, "ringHash.minimumRingSize"), ErrInvalid, "%d is more than %d", n, maxRingSize)
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_Maglev:
		if ch.GetMinimumRingSize() != 0 {
			c.add(join(path, "minimumRingSize"), ErrInvalid, "is for a ring, not maglev (use maglev.tableSize)")
		}
		if n := a.Maglev.GetTableSize(); n != 0 && (n > maxMaglevTableSize || !prime(n)) {
			c.add(join(path, "maglev.tableSize"), ErrInvalid, "%d: a prime up to %d is required (Envoy's rule)", n, maxMaglevTableSize)
		}
	default:
		if n := ch.GetMinimumRingSize(); n > maxRingSize {
			c.add(join(path, "minimumRingSize"), ErrInvalid, "%d is more than %d", n, maxRingSize)
		}
	}
}

func prime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// HashOf is the hash key of subset ("" for the whole service) under dr
// (nil: none): EffectivePolicy's Hash, without the rest of its work (a
// route asks it of each destination).
func HashOf(dr *Object, subset string) HashKey {
	if dr == nil {
		return HashKey{}
	}
	lb := dr.DestinationRule.TrafficPolicy.GetLoadBalancer()
	if subset != "" {
		for _, s := range dr.DestinationRule.Subsets {
			if s.Name == subset && s.TrafficPolicy.GetLoadBalancer() != nil {
				lb = s.TrafficPolicy.GetLoadBalancer()
			}
		}
	}
	var p Policy
	if ch := lb.GetConsistentHash(); ch != nil {
		hashPolicy(&p, ch)
	}
	return p.Hash
}
