package xds

import (
	"cmp"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/config"
)

// DNSCluster builds the CDS resource of a ServiceEntry resolved by DNS, as
// Istio publishes it: type STRICT_DNS (every address each name resolves to
// is an endpoint; resolution DNS) or LOGICAL_DNS (the first address of the
// one name, re-resolved for new connections; DNS_ROUND_ROBIN, and NONE in
// Sextant), endpoints inline in load_assignment by host name. The rest (load
// balancing, timeouts, outlier detection, TLS) is Cluster's. Envoy and
// Sextant's gateway resolve the names themselves; grpc-go reads a
// LOGICAL_DNS cluster of one endpoint and refuses STRICT_DNS
// (docs/controlplane.md).
func DNSCluster(name string, p config.Policy, logical bool, eps []Endpoint) *clusterv3.Cluster {
	c := Cluster(name, p)
	c.EdsClusterConfig = nil
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
	if logical {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS}
		// LOGICAL_DNS takes exactly one endpoint.
		if len(eps) > 1 {
			eps = eps[:1]
		}
	}
	// IPv4 when the name has IPv4 addresses, else IPv6: a name such as
	// localhost answers both, and a server often listens on one.
	c.DnsLookupFamily = clusterv3.Cluster_V4_PREFERRED
	c.LoadAssignment = nameAssignment(name, eps)
	return c
}

// nameAssignment is LoadAssignment for endpoints addressed by host name
// (or IP), each weighted, grouped by locality.
func nameAssignment(cluster string, eps []Endpoint) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: cluster}
	type hostPort struct {
		host string
		port uint32
	}
	seen := map[hostPort]bool{}
	byLoc := map[string]*endpointv3.LocalityLbEndpoints{}
	var keys []string
	for _, e := range eps {
		if e.Weight == 0 || e.Port == 0 || seen[hostPort{e.Host, e.Port}] {
			continue
		}
		seen[hostPort{e.Host, e.Port}] = true
		l := locality(e.Metadata)
		key := l.Region + "\x00" + l.Zone + "\x00" + l.SubZone
		le := byLoc[key]
		if le == nil {
			le = &endpointv3.LocalityLbEndpoints{Locality: l, LoadBalancingWeight: wrapperspb.UInt32(0)}
			byLoc[key] = le
			keys = append(keys, key)
		}
		le.LoadBalancingWeight.Value += e.Weight
		le.LbEndpoints = append(le.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: e.Host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: e.Port},
				}}},
			}},
			LoadBalancingWeight: wrapperspb.UInt32(e.Weight),
		})
	}
	slices.SortFunc(keys, cmp.Compare)
	for _, k := range keys {
		cla.Endpoints = append(cla.Endpoints, byLoc[k])
	}
	return cla
}
