package ingress

import (
	"fmt"
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// passthrough reports whether a server forwards TLS unopened (a TLS or
// HTTPS server in tls.mode PASSTHROUGH, the enum's zero value: a plaintext
// server's tls reads PASSTHROUGH too): the endpoint does the handshake.
func passthrough(sv server) bool {
	proto := strings.ToUpper(sv.s.GetPort().GetProtocol())
	return (proto == "TLS" || proto == "HTTPS") && sv.s.GetTls() != nil && sv.s.GetTls().GetMode() == networking.ServerTLSSettings_PASSTHROUGH
}

// passthroughChains builds the filter chains of a PASSTHROUGH server, as
// Istio does: for each TLS route of a VirtualService bound to the server's
// Gateway, each of its match's sniHosts that the server serves (and not
// claimed on this port yet) becomes a chain matching that server name on a
// TLS ClientHello, whose tcp_proxy forwards to the route's destinations
// (weighted). A name matched twice keeps its first route.
func passthroughChains(p *port, sv server, vss []*config.Entry, claimed map[string]bool) ([]*listenerv3.FilterChain, []string) {
	var chains []*listenerv3.FilterChain
	var warns []string
	for _, e := range vss {
		vs := e.Object
		if !bound(vs, sv.gw) {
			continue
		}
		for ri, r := range vs.VirtualService.Tls {
			var names []string
			for _, m := range r.Match {
				if m.Port != 0 && m.Port != p.number {
					continue
				}
				for _, sni := range m.SniHosts {
					if !serves(sv, vs.Namespace, sni) {
						continue
					}
					if claimed[sni] {
						warns = append(warns, fmt.Sprintf("%s spec.tls[%d]: server name %q is already served on port %d; left out", vs.Key, ri, sni, p.number))
						continue
					}
					claimed[sni] = true
					names = append(names, sni)
				}
			}
			if len(names) == 0 {
				continue
			}
			proxy := &tcpproxyv3.TcpProxy{StatPrefix: fmt.Sprintf("%s/%d", vs.Key, ri)}
			if len(r.Route) == 1 {
				proxy.ClusterSpecifier = &tcpproxyv3.TcpProxy_Cluster{Cluster: clusterOf(vs, r.Route[0].GetDestination())}
			} else {
				wc := &tcpproxyv3.TcpProxy_WeightedCluster{}
				for _, d := range r.Route {
					if d.Weight > 0 {
						wc.Clusters = append(wc.Clusters, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{
							Name: clusterOf(vs, d.GetDestination()), Weight: uint32(d.Weight)})
					}
				}
				proxy.ClusterSpecifier = &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: wc}
			}
			a, _ := anypb.New(proxy)
			if slices.Contains(names, "*") {
				// sniHosts "*": any server name, as Istio writes it (a
				// chain without server_names).
				names = nil
			}
			chains = append(chains, &listenerv3.FilterChain{
				FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: names, TransportProtocol: "tls"},
				Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.tcp_proxy",
					ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a}}},
			})
		}
	}
	if len(chains) == 0 {
		warns = append(warns, fmt.Sprintf("%s: PASSTHROUGH: no VirtualService bound to %s has a TLS route for its hosts on port %d; nothing is forwarded", sv.path, sv.gw, p.number))
	}
	return chains, warns
}

// serves reports whether server sv serves name for VirtualServices of
// namespace ns.
func serves(sv server, ns, name string) bool {
	for _, h := range sv.hosts {
		if (h.Namespace == "*" || h.Namespace == ns) && config.MatchHost(h.Host, name) {
			return true
		}
	}
	return false
}

// clusterOf is the cluster the push engine publishes for a destination:
// the service's, or its subset's.
func clusterOf(vs *config.Object, d *networking.Destination) string {
	k, err := config.ResolveHost(d.GetHost(), vs.Namespace)
	if err != nil {
		return "" // refused at apply
	}
	return xds.ClusterName(k, d.GetSubset(), 0)
}
