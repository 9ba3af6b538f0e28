package config

import (
	"slices"
	"time"

	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/locality"
)

// Policy is the traffic policy in force for one cluster: a
// DestinationRule's trafficPolicy overlaid by its subset's, field group by
// field group as Istio merges them (a subset's loadBalancer, connectionPool
// or outlierDetection replaces the rule's whole group).
type Policy struct {
	// LoadBalancer is one of the Policy* names; "" means round robin.
	LoadBalancer string
	// RingSize is a ring_hash policy's minimum ring size, or a maglev
	// policy's table size (0: Envoy's default).
	RingSize uint64
	// Hash is what a consistent-hash policy hashes of a call (routes carry
	// it: Envoy's route hash_policy).
	Hash           HashKey
	ConnectTimeout time.Duration // 0: the data plane's default
	IdleTimeout    time.Duration // 0: the data plane's default
	// TCPIdleTimeout is connectionPool.tcp.idleTimeout: a TCP route's
	// tcp_proxy idle_timeout (0: Envoy's default, an hour).
	TCPIdleTimeout time.Duration
	// HTTP2: the endpoints speak HTTP/2 (gRPC): connectionPool.http.
	// h2UpgradePolicy UPGRADE, as Istio reads it.
	HTTP2 bool
	// Circuit is the connection pool's limits (connpool.go).
	Circuit Circuit
	// Outlier is the outlier detection in force, nil for none.
	Outlier *networking.OutlierDetection
	// TLS is how clients reach the service, nil for plaintext (a
	// trafficPolicy.tls of mode ISTIO_MUTUAL: the mesh's mutual TLS).
	TLS *networking.ClientTLSSettings
	// HealthCheck is the active health check of the rule's clusters
	// (AnnotationHealthCheck), nil for none; its HTTP host is filled.
	HealthCheck *HealthCheck
	// TLSNamespace is where TLS's credentialName is (the DestinationRule's
	// namespace).
	TLSNamespace string
	// Locality is loadBalancer.localityLbSetting (localitylb.go), nil for
	// Istio's defaults. A pointer: policies compared with == compare it by
	// identity, and one DestinationRule's decode gives one.
	Locality *locality.Rules
}

// EffectivePolicy returns the policy of subset ("" for the whole service)
// on port (0: none; portLevelSettings: portlevel.go) under dr, which may be
// nil.
func EffectivePolicy(dr *Object, subset string, port uint32) Policy {
	var p Policy
	if dr == nil {
		return p
	}
	top := atPort(dr.DestinationRule.TrafficPolicy, port)
	var sub *networking.TrafficPolicy
	if subset != "" {
		for _, s := range dr.DestinationRule.Subsets {
			if s.Name == subset {
				sub = s.TrafficPolicy
				if ps := atPort(sub, port); ps != sub {
					top, sub = ps, nil // the subset's port settings replace all
				}
			}
		}
	}
	lb := top.GetLoadBalancer()
	if sub.GetLoadBalancer() != nil {
		lb = sub.GetLoadBalancer()
	} else if a, ok := dr.Annotations[AnnotationLoadBalancer]; ok && lb == nil {
		p.LoadBalancer = a
	}
	p.Locality = localityRules(lb.GetLocalityLbSetting())
	if ch := lb.GetConsistentHash(); ch != nil {
		hashPolicy(&p, ch)
	} else if lb != nil {
		switch lb.GetSimple() {
		case networking.LoadBalancerSettings_LEAST_REQUEST, networking.LoadBalancerSettings_LEAST_CONN:
			p.LoadBalancer = PolicyLeastRequest
		case networking.LoadBalancerSettings_RANDOM:
			p.LoadBalancer = PolicyRandom
		default:
			p.LoadBalancer = PolicyRoundRobin
		}
	}
	cp := top.GetConnectionPool()
	if sub.GetConnectionPool() != nil {
		cp = sub.GetConnectionPool()
	}
	if d := cp.GetTcp().GetConnectTimeout(); d != nil {
		p.ConnectTimeout = d.AsDuration()
	}
	if d := cp.GetTcp().GetIdleTimeout(); d != nil {
		p.TCPIdleTimeout = d.AsDuration()
	}
	if d := cp.GetHttp().GetIdleTimeout(); d != nil {
		p.IdleTimeout = d.AsDuration()
	}
	p.HTTP2 = cp.GetHttp().GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE
	p.Circuit = circuitOf(cp)
	// The rule's retryBudget, or its subset's (port settings have none).
	rb := dr.DestinationRule.TrafficPolicy.GetRetryBudget()
	for _, s := range dr.DestinationRule.Subsets {
		if subset != "" && s.Name == subset && s.TrafficPolicy.GetRetryBudget() != nil {
			rb = s.TrafficPolicy.GetRetryBudget()
		}
	}
	p.Circuit.retryBudgetOf(rb)
	p.Outlier = top.GetOutlierDetection()
	if sub.GetOutlierDetection() != nil {
		p.Outlier = sub.GetOutlierDetection()
	}
	p.TLS = top.GetTls()
	if sub.GetTls() != nil {
		p.TLS = sub.GetTls()
	}
	if p.TLS.GetMode() == networking.ClientTLSSettings_DISABLE {
		p.TLS = nil
	}
	if a, ok := dr.Annotations[AnnotationHealthCheck]; ok {
		if hc, err := ParseHealthCheck(a); err == nil { // validated at apply
			if hc.HTTP != nil && hc.HTTP.Host == "" {
				hc.HTTP.Host = dr.DestinationRule.Host
			}
			p.HealthCheck = hc
		}
	}
	if p.TLS != nil {
		p.TLSNamespace = dr.Namespace
	}
	return p
}

// SubsetSelector returns the label selector of subset name under dr (every
// label must equal), and false if dr defines no such subset.
func SubsetSelector(dr *Object, name string) (label.Selector, bool) {
	if dr == nil {
		return nil, false
	}
	for _, s := range dr.DestinationRule.Subsets {
		if s.Name != name {
			continue
		}
		sel := make(label.Selector, 0, len(s.Labels))
		for k, v := range s.Labels {
			sel = append(sel, label.Requirement{Key: k, Op: label.Equals, Values: []string{v}})
		}
		slices.SortFunc(sel, func(a, b label.Requirement) int {
			if a.Key < b.Key {
				return -1
			}
			if a.Key > b.Key {
				return 1
			}
			return 0
		})
		return sel, true
	}
	return nil, false
}
