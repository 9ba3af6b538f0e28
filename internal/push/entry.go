package push

import (
	"strings"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// A ServiceEntry's endpoints are not instances: the config worker puts
// them in the service's spec (serviceSpec.entry), from which the endpoint
// worker publishes a STATIC entry's EDS with the registry's instances, and
// the config worker builds a DNS entry's clusters with their hostnames
// (STRICT_DNS, LOGICAL_DNS), which carry no EDS.

// dnsEntry reports whether spec's service is a ServiceEntry resolved by
// DNS: its clusters carry their endpoints, no EDS is published.
func (s *serviceSpec) dnsEntry() bool {
	return s.entry != nil && s.entry.Resolution != config.ResolveStatic
}

// entryEndpoints are the endpoints of cluster c that spec's ServiceEntry
// gives: those whose labels match the subset's selector, on the cluster's
// port; a cluster of no port is on the entry's first port (a client calls
// one port of an external service; a route names the others).
func entryEndpoints(spec *serviceSpec, c clusterSpec) []xds.Endpoint {
	if spec.entry == nil || len(spec.entry.Endpoints) == 0 {
		return nil
	}
	port := c.port
	if port == 0 {
		port = spec.entry.Endpoints[0].ServicePort
	}
	var out []xds.Endpoint
	for i := range spec.entry.Endpoints {
		ep := &spec.entry.Endpoints[i]
		if ep.ServicePort != port || len(c.sel) > 0 && !ep.Matches(c.sel) {
			continue
		}
		out = append(out, xds.Endpoint{
			ID: ep.ID(spec.entry.Key), Host: ep.Address, Port: ep.Port, Weight: ep.Weight, Healthy: true,
			Metadata: entryLabels(ep),
		})
	}
	return out
}

// entryLabels are an entry endpoint's labels with its locality as the
// region, zone and subzone keys LoadAssignment reads.
func entryLabels(ep *config.EntryEndpoint) label.Labels {
	if ep.Locality == "" {
		return label.FromMap(ep.Labels)
	}
	m := make(map[string]string, len(ep.Labels)+3)
	for k, v := range ep.Labels {
		m[k] = v
	}
	parts := strings.SplitN(ep.Locality, "/", 3)
	for i, k := range []string{xds.MetaRegion, xds.MetaZone, xds.MetaSubZone}[:len(parts)] {
		if _, ok := m[k]; !ok {
			m[k] = parts[i]
		}
	}
	return label.FromMap(m)
}

// entryHTTP2 reports whether every endpoint of cluster c serves a port of
// protocol GRPC or HTTP2 (the cluster speaks HTTP/2 to them, as Istio
// publishes such ports).
func entryHTTP2(spec *serviceSpec, c clusterSpec) bool {
	if spec.entry == nil {
		return false
	}
	if spec.entry.Selected != nil {
		return selectedHTTP2(spec.entry.Selected, c)
	}
	found := false
	for i := range spec.entry.Endpoints {
		ep := &spec.entry.Endpoints[i]
		if port := c.port; ep.ServicePort != port && (port != 0 || ep.ServicePort != spec.entry.Endpoints[0].ServicePort) {
			continue
		}
		if !ep.HTTP2 {
			return false
		}
		found = true
	}
	return found
}

// clusterPort is the port whose portLevelSettings apply to cluster c: the
// route's port, or for an entry's whole-service cluster the entry's first.
func (s *serviceSpec) clusterPort(c clusterSpec) uint32 {
	if c.port == 0 && s.entry != nil && s.entry.Selected != nil {
		if p := s.entry.Selected.FirstPort(); p != nil {
			return p.Number
		}
	}
	if c.port == 0 && s.entry != nil && len(s.entry.Endpoints) > 0 {
		return s.entry.Endpoints[0].ServicePort
	}
	return c.port
}
