package config

import (
	networking "istio.io/api/networking/v1"
)

// A trafficPolicy's portLevelSettings: the policy of the clusters of one
// port (a route's destination.port, or a ServiceEntry's port), replacing
// the rule's loadBalancer, connectionPool, outlierDetection and tls whole,
// as Istio merges them ("port level settings will override the
// destination-level settings ... default values will be applied to fields
// omitted"). A subset's policy applies over the rule's with the rule's
// port-level settings, then the subset's own port-level settings.
func init() {
	allow(&networking.TrafficPolicy{}, "port_level_settings")
	allow(&networking.TrafficPolicy_PortTrafficPolicy{}, "port", "load_balancer", "connection_pool", "outlier_detection", "tls")
}

func validatePortLevel(c errs, path string, tp *networking.TrafficPolicy) {
	seen := map[uint32]bool{}
	for i, pl := range tp.PortLevelSettings {
		p := index(join(path, "portLevelSettings"), i)
		if pl == nil {
			c.add(p, ErrInvalid, "want an object, got null")
			continue
		}
		n := pl.GetPort().GetNumber()
		switch {
		case n == 0 || n > 65535:
			c.add(join(p, "port.number"), ErrInvalid, "%d: want 1..65535", n)
		case seen[n]:
			c.add(join(p, "port.number"), ErrInvalid, "%d: another entry has this port", n)
		}
		seen[n] = true
		if pl.GetLoadBalancer().GetConsistentHash() != nil {
			// Routes carry the hash policy per destination (subset), not
			// per port.
			c.add(join(p, "loadBalancer.consistentHash"), ErrNotSupported,
				"not supported at port level: set consistentHash on the rule or a subset")
		}
		validatePolicy(c, p, portPolicy(pl))
	}
}

// portPolicy is a port's settings as a policy of their own.
func portPolicy(pl *networking.TrafficPolicy_PortTrafficPolicy) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{LoadBalancer: pl.LoadBalancer, ConnectionPool: pl.ConnectionPool,
		OutlierDetection: pl.OutlierDetection, Tls: pl.Tls}
}

// atPort returns tp with its portLevelSettings for port in force (tp
// itself when none matches, or port is 0).
func atPort(tp *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	if port == 0 {
		return tp
	}
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == port {
			return portPolicy(pl)
		}
	}
	return tp
}
