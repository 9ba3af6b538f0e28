package ingress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
)

// tcpListener builds a TCP port's listener as Istio builds a Gateway's
// TCP server: for each tcp route of a VirtualService bound to a server's
// Gateway (and naming a host the server serves), each of its matches that
// applies on the port and Gateway becomes a filter chain matching the
// match's destinationSubnets (prefix_ranges) and sourceSubnet
// (source_prefix_ranges), whose tcp_proxy forwards to the route's
// destinations (weighted), with the idle timeout of the first
// destination's DestinationRule (connectionPool.tcp.idleTimeout). A match
// another route already claimed is warned about and left out: Envoy would
// refuse two chains with the same match.
func tcpListener(name string, p *port, vss []*config.Entry, drs *config.Index) (*listenerv3.Listener, []string) {
	l := &listenerv3.Listener{Name: name, Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: p.number}}}}}
	var warns []string
	claimed := map[string]string{}
	for _, sv := range p.servers {
		for _, e := range vss {
			vs := e.Object
			if !bound(vs, sv.gw) || !slices.ContainsFunc(vs.VirtualService.Hosts, func(h string) bool { return servesEither(sv, vs.Namespace, h) }) {
				continue
			}
			for ri, r := range vs.VirtualService.Tcp {
				where := fmt.Sprintf("%s spec.tcp[%d]", vs.Key, ri)
				matches := r.Match
				if len(matches) == 0 {
					matches = []*networking.L4MatchAttributes{{}}
				}
				for _, m := range matches {
					if m.Port != 0 && m.Port != p.number {
						continue
					}
					if len(m.Gateways) > 0 && !slices.ContainsFunc(m.Gateways, func(ref string) bool {
						k, ok := config.GatewayRef(ref, vs.Namespace)
						return ok && k == sv.gw
					}) {
						continue
					}
					fcm := &listenerv3.FilterChainMatch{}
					for _, s := range m.DestinationSubnets {
						if pr, err := config.ParseSubnet(s); err == nil {
							fcm.PrefixRanges = append(fcm.PrefixRanges, cidr(pr))
						}
					}
					if m.SourceSubnet != "" {
						if pr, err := config.ParseSubnet(m.SourceSubnet); err == nil {
							fcm.SourcePrefixRanges = []*corev3.CidrRange{cidr(pr)}
						}
					}
					key := matchKey(fcm)
					if prev, dup := claimed[key]; dup {
						if prev != where {
							warns = append(warns, fmt.Sprintf("%s: port %d: the same match is already routed by %s; left out", where, p.number, prev))
						}
						continue
					}
					claimed[key] = where
					l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
						FilterChainMatch: fcm,
						Filters:          []*listenerv3.Filter{tcpProxyFilter(fmt.Sprintf("%s/%d", vs.Key, ri), vs, r.Route, drs)},
					})
				}
			}
		}
	}
	if len(l.FilterChains) == 0 {
		warns = append(warns, fmt.Sprintf("port %d (TCP): no VirtualService bound to its Gateways has a tcp route for it; connections are closed", p.number))
	}
	return l, warns
}

// tcpProxyFilter is a tcp_proxy to a route's destinations.
func tcpProxyFilter(stat string, vs *config.Object, route []*networking.RouteDestination, drs *config.Index) *listenerv3.Filter {
	proxy := &tcpproxyv3.TcpProxy{StatPrefix: stat}
	if len(route) == 1 {
		proxy.ClusterSpecifier = &tcpproxyv3.TcpProxy_Cluster{Cluster: clusterOf(vs, route[0].GetDestination())}
	} else {
		wc := &tcpproxyv3.TcpProxy_WeightedCluster{}
		for _, d := range route {
			if d.Weight > 0 {
				wc.Clusters = append(wc.Clusters, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{
					Name: clusterOf(vs, d.GetDestination()), Weight: uint32(d.Weight)})
			}
		}
		proxy.ClusterSpecifier = &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: wc}
	}
	if d := route[0].GetDestination(); d != nil && drs != nil {
		if k, err := config.ResolveHost(d.Host, vs.Namespace); err == nil {
			port := d.GetPort().GetNumber()
			if t := config.EffectivePolicy(drs.DestinationRule(k), d.Subset, port).TCPIdleTimeout; t > 0 {
				proxy.IdleTimeout = durationpb.New(t)
			}
		}
	}
	a, _ := anypb.New(proxy)
	return &listenerv3.Filter{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a}}
}

func cidr(p netip.Prefix) *corev3.CidrRange {
	return &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}
}

// matchKey identifies a chain's match (Envoy refuses two alike).
func matchKey(m *listenerv3.FilterChainMatch) string {
	var b strings.Builder
	for _, r := range m.PrefixRanges {
		fmt.Fprintf(&b, "%s/%d,", r.AddressPrefix, r.PrefixLen.GetValue())
	}
	b.WriteString("|")
	for _, r := range m.SourcePrefixRanges {
		fmt.Fprintf(&b, "%s/%d,", r.AddressPrefix, r.PrefixLen.GetValue())
	}
	return b.String()
}

// servesEither reports whether server sv and a VirtualService host h of
// namespace ns meet: either's wildcard covers the other ("*" binds any).
func servesEither(sv server, ns, h string) bool {
	for _, sh := range sv.hosts {
		if (sh.Namespace == "*" || sh.Namespace == ns) && (config.MatchHost(sh.Host, h) || config.MatchHost(h, sh.Host)) {
			return true
		}
	}
	return false
}

// tcpIndex indexes the DestinationRules drs for the TCP routes' idle
// timeouts (nil when there are none).
func tcpIndex(drs []*config.Entry) *config.Index {
	if len(drs) == 0 {
		return nil
	}
	ix := config.NewIndex()
	for _, e := range drs {
		ix.Put(e.Object)
	}
	return ix
}
