//lint:file-ignore SA1019 deprecated Envoy fields are still sent by control planes; the gateway reads them as Envoy does.

package gateway

import (
	"net/netip"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// fuzzSeeds are well-formed resources of each type, wire-encoded.
func fuzzSeeds(t testing.TB) [][]byte {
	md, _ := structpb.NewStruct(map[string]any{"version": "v1", "list": []any{"a", "b"}})
	msgs := []proto.Message{
		&route.RouteConfiguration{Name: "r", VirtualHosts: []*route.VirtualHost{{Name: "v", Domains: []string{"*", "*.a.com", "b.*"},
			RetryPolicy: &route.RetryPolicy{RetryOn: "5xx,reset", NumRetries: wrapperspb.UInt32(2)},
			Routes: []*route.Route{{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "/a+"}},
				Headers: []*route.HeaderMatcher{{Name: "x", HeaderMatchSpecifier: &route.HeaderMatcher_PrefixMatch{PrefixMatch: "p"}}}},
				Action: &route.Route_Route{Route: &route.RouteAction{Timeout: durationpb.New(time.Second),
					ClusterSpecifier: &route.RouteAction_WeightedClusters{WeightedClusters: &route.WeightedCluster{
						Clusters: []*route.WeightedCluster_ClusterWeight{{Name: "c", Weight: wrapperspb.UInt32(1)}}}}}}}}}}},
		&cluster.Cluster{Name: "c", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
			LbSubsetConfig:   &cluster.Cluster_LbSubsetConfig{SubsetSelectors: []*cluster.Cluster_LbSubsetConfig_LbSubsetSelector{{Keys: []string{"version"}}}},
			OutlierDetection: &cluster.OutlierDetection{Consecutive_5Xx: wrapperspb.UInt32(3)},
			HealthChecks: []*core.HealthCheck{{Timeout: durationpb.New(time.Second), Interval: durationpb.New(time.Second),
				UnhealthyThreshold: wrapperspb.UInt32(2), HealthyThreshold: wrapperspb.UInt32(1),
				HealthChecker: &core.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &core.HealthCheck_HttpHealthCheck{Path: "/healthz",
					RequestHeadersToAdd: []*core.HeaderValueOption{{Header: &core.HeaderValue{Key: "x", Value: "y"}}}}}}}},
		&endpointpb.ClusterLoadAssignment{ClusterName: "c", Endpoints: []*endpointpb.LocalityLbEndpoints{{LbEndpoints: []*endpointpb.LbEndpoint{{
			HostIdentifier: &endpointpb.LbEndpoint_Endpoint{Endpoint: &endpointpb.Endpoint{Address: &core.Address{Address: &core.Address_SocketAddress{
				SocketAddress: &core.SocketAddress{Address: "10.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: 80}}}}}},
			Metadata: &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": md}}}}}}},
	}
	msgs = append(msgs, fuzzTLSSeeds(t)...)
	msgs = append(msgs, fuzzFilterSeeds()...)
	// What Sextant's control plane publishes: default retry policy and
	// outlier detection, load_balancing_policy lists, cluster metadata.
	svc := naming.ServiceKey{Namespace: "default", Name: "orders"}
	vh := xds.VirtualHost("orders", []string{"*"}, svc, nil, func(config.Destination) (string, bool) { return "default/orders/v1", true }, nil)
	msgs = append(msgs, xds.RouteConfiguration("default/orders", vh),
		xds.Cluster("default/orders/v1", config.Policy{LoadBalancer: config.PolicyLeastRequest}),
		// A ServiceEntry resolved by DNS (dns.go).
		xds.DNSCluster("com/api.example", config.Policy{}, false, []xds.Endpoint{{Host: "api.example.com", Port: 443, Weight: 1}}),
		xds.DNSCluster("default/localhost", config.Policy{}, true, []xds.Endpoint{{Host: "localhost", Port: 80, Weight: 1}}))
	// A sidecar's inbound listener in each PeerAuthentication mode (mixed
	// TLS and plaintext chains, non_forwarding_action: inbound.go).
	ap := netip.MustParseAddrPort("10.0.0.5:15006")
	for _, mode := range []security.PeerAuthentication_MutualTLS_Mode{security.PeerAuthentication_MutualTLS_STRICT,
		security.PeerAuthentication_MutualTLS_PERMISSIVE, security.PeerAuthentication_MutualTLS_DISABLE} {
		msgs = append(msgs, xds.ServerListener(InboundListenerName(ap.String()), ap, mode, nil))
	}
	// A listener with a Telemetry's tracing and access logs (telemetry.go).
	tl := xds.HTTPListener("sextant-http", 15001, "sextant-http")
	lf, err := config.ParseLogFilter(`response.code != 200 || response.duration > duration("1s")`)
	if err != nil {
		t.Fatal(err)
	}
	if err := xds.WithTelemetry(tl, config.TelemetryPolicy{Tracing: config.TracingPolicy{Set: true, Sampling: 5, HasSampling: true},
		AccessLogs: []config.AccessLogPolicy{{Provider: config.ProviderEnvoy, Filter: lf}, {Provider: config.ProviderEnvoyJSON}}}); err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, tl)
	// A Gateway TCP server's listener (tcp.go): chains by prefix ranges.
	tp, _ := anypb.New(&tcpproxy.TcpProxy{StatPrefix: "tcp", IdleTimeout: durationpb.New(time.Second),
		ClusterSpecifier: &tcpproxy.TcpProxy_WeightedClusters{WeightedClusters: &tcpproxy.TcpProxy_WeightedCluster{
			Clusters: []*tcpproxy.TcpProxy_WeightedCluster_ClusterWeight{{Name: "a", Weight: 80}, {Name: "b", Weight: 20}}}}})
	msgs = append(msgs, &listenerpb.Listener{Name: "sextant-gateway-31400", FilterChains: []*listenerpb.FilterChain{
		{FilterChainMatch: &listenerpb.FilterChainMatch{PrefixRanges: []*core.CidrRange{{AddressPrefix: "10.0.0.0", PrefixLen: wrapperspb.UInt32(8)}},
			SourcePrefixRanges: []*core.CidrRange{{AddressPrefix: "::1", PrefixLen: wrapperspb.UInt32(128)}}},
			Filters: []*listenerpb.Filter{{Name: tcpProxyFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: tp}}}},
		{Filters: []*listenerpb.Filter{{Name: tcpProxyFilterName, ConfigType: &listenerpb.Filter_TypedConfig{TypedConfig: tp}}}}}})
	var out [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzDecodeResources feeds arbitrary bytes to every xDS decoder as each
// resource type: a control plane is outside input. Decoders must never
// panic, and what they accept must build a routing table.
func FuzzDecodeResources(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		for typ := range uint8(len(XDSTypes())) {
			f.Add(s, typ)
		}
	}
	types := XDSTypes()
	f.Fuzz(func(t *testing.T, data []byte, typ uint8) {
		tp := types[int(typ)%len(types)]
		name, v, err := tp.Decode(&anypb.Any{TypeUrl: tp.URL, Value: data})
		if err != nil {
			return
		}
		switch s := v.(type) {
		case *routeConfigSpec:
			tb := newTable(s, map[string]*clusterRT{})
			for _, vh := range tb.exact {
				_ = vh.name
			}
		case *listenerSpec:
			if len(s.tcpChains) > 0 {
				l := &tcpListenerRT{chains: s.tcpChains}
				_ = l.match(netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("::1"))
				for _, c := range s.tcpChains {
					_, _ = newTCPProxyRT(c.tcp, map[string]*clusterRT{}).pick()
				}
			}
			for _, c := range s.chains {
				if c.tls != nil {
					chainConfig(c.tls, map[string]any{})
				}
			}
		case *secretSpec:
			if s.cert == nil && s.ca == nil {
				t.Fatal("accepted secret holds neither a certificate nor a CA")
			}
		case *clusterSpec:
			if s.name != name {
				t.Fatalf("name %q != %q", s.name, name)
			}
			p, err := newPolicy(s)
			if err != nil {
				t.Fatalf("accepted cluster has no policy: %v", err)
			}
			if _, err := newClusterRT(s, p, newMetrics().cluster("c")); err != nil {
				t.Fatalf("accepted cluster does not build: %v", err)
			}
		}
	})
}
