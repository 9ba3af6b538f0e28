package ingress

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// ServicePorts is one registry service and the ports its instances listen
// on (sorted, each once): what an AUTO_PASSTHROUGH server exposes.
type ServicePorts struct {
	Service naming.ServiceKey
	Ports   []uint32
}

// exposed is what AUTO_PASSTHROUGH servers may expose: the registry's
// services, to a Gateway of their own namespace or of the root namespace.
type exposed struct {
	svcs []ServicePorts
	root string
}

// autoPassthrough reports whether a server forwards TLS unopened to the
// service its ClientHello's server name names (tls.mode AUTO_PASSTHROUGH,
// protocol TLS: validation refuses it elsewhere).
func autoPassthrough(sv server) bool {
	return strings.EqualFold(sv.s.GetPort().GetProtocol(), "TLS") && sv.s.GetTls().GetMode() == networking.ServerTLSSettings_AUTO_PASSTHROUGH
}

// SNIName is the server name a mesh client sends to reach port of host
// (subset "" for the whole service) through an AUTO_PASSTHROUGH server:
// Istio's cluster name "outbound|PORT|SUBSET|HOST" with dots for bars,
// "outbound_.9080_._.reviews.default.svc.cluster.local".
func SNIName(port uint32, subset, host string) string {
	return "outbound_." + strconv.FormatUint(uint64(port), 10) + "_." + subset + "_." + host
}

// autoChains builds the filter chains of an AUTO_PASSTHROUGH server, as
// Istio does: for each service of the Gateway's namespace (of any, for a
// Gateway of the root namespace) the server's hosts expose (a host of the
// service's, name.namespace, name.namespace.svc or
// name.namespace.svc.cluster.local, matching one of the server's hosts for
// the service's namespace), each port its instances listen on, and the
// whole service and each subset of its DestinationRule, one chain whose
// server_names are SNIName of those host forms and whose tcp_proxy goes to
// the cluster the push engine publishes for it (the service's or the
// subset's, not restricted to the port: a service whose instances listen
// on several ports is warned about). A server name not published matches no chain: the gateway
// closes the connection. Names already served on the port are left out.
func autoChains(p *port, sv server, ex exposed, subsetsOf func(naming.ServiceKey) []string, claimed map[string]bool) ([]*listenerv3.FilterChain, []string) {
	var chains []*listenerv3.FilterChain
	var warns []string
	for _, sp := range ex.svcs {
		if sv.gw.Namespace != ex.root && sv.gw.Namespace != sp.Service.Namespace {
			// A namespace's writer opens its own services only, not
			// another team's; the mesh's root namespace opens any.
			continue
		}
		var hosts []string
		for _, h := range config.Hostnames(sp.Service) {
			for _, sh := range sv.hosts {
				if (sh.Namespace == "*" || sh.Namespace == sp.Service.Namespace) && config.MatchHost(sh.Host, h) {
					hosts = append(hosts, h)
					break
				}
			}
		}
		if len(hosts) == 0 {
			continue
		}
		if len(sp.Ports) > 1 {
			// The clusters are the push engine's whole-service and subset
			// ones, of every port: say so rather than forward silently.
			warns = append(warns, fmt.Sprintf("%s: AUTO_PASSTHROUGH: the instances of %s listen on several ports (%v): a server name's port picks among all of them", sv.path, sp.Service, sp.Ports))
		}
		subsets := append([]string{""}, subsetsOf(sp.Service)...)
		for _, port := range sp.Ports {
			for _, sub := range subsets {
				var names []string
				for _, h := range hosts {
					n := SNIName(port, sub, h)
					if claimed[n] {
						warns = append(warns, fmt.Sprintf("%s: server name %q is already served on port %d; left out", sv.path, n, p.number))
						continue
					}
					claimed[n] = true
					names = append(names, n)
				}
				if len(names) == 0 {
					continue
				}
				cluster := xds.ClusterName(sp.Service, sub, 0)
				a, _ := anypb.New(&tcpproxyv3.TcpProxy{StatPrefix: cluster,
					ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: cluster}})
				chains = append(chains, &listenerv3.FilterChain{
					FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: names, TransportProtocol: "tls"},
					Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.tcp_proxy",
						ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a}}},
				})
			}
		}
	}
	if len(chains) == 0 {
		warns = append(warns, fmt.Sprintf("%s: AUTO_PASSTHROUGH: no registered service with instances matches its hosts on port %d; nothing is forwarded", sv.path, p.number))
	}
	return chains, warns
}

// subsetsFrom answers the subset names of each service's DestinationRule
// in force (chosen as the push engine's index chooses it).
func subsetsFrom(drs []*config.Entry) func(naming.ServiceKey) []string {
	ix := config.NewIndex()
	for _, e := range drs {
		ix.Put(e.Object)
	}
	return func(s naming.ServiceKey) []string {
		dr := ix.DestinationRule(s)
		if dr == nil {
			return nil
		}
		var out []string
		for _, sub := range dr.DestinationRule.Subsets {
			out = append(out, sub.Name)
		}
		return out
	}
}

// hasAuto reports whether any Gateway has an AUTO_PASSTHROUGH server: only
// then does the publisher read the registry's services.
func hasAuto(gws []*config.Entry) bool {
	for _, e := range gws {
		if slices.ContainsFunc(e.Object.Gateway.Servers, func(s *networking.Server) bool {
			return autoPassthrough(server{s: s})
		}) {
			return true
		}
	}
	return false
}
