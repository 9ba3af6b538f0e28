// Package gateway is "sextant bench gateway": the gateway measured side by
// side with nginx and HAProxy (throughput, CPU per request, added latency at
// a fixed rate, call recording on and off), the candidate data paths it was
// chosen from, and the 2019 race replayed through it. It owns the bench's
// loopback control plane (go-control-plane's own ADS server), the proxies'
// configs and the loaders; it does not own the gateway.
package gateway

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	xdstype "github.com/cncf/xds/go/xds/type/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/balancer"
	gw "github.com/sextant-mesh/sextant/internal/gateway"
)

// NodeID is the xDS node id the bench's gateways use.
const NodeID = "sextant-bench"

// controlPlane serves a snapshot to the bench's gateways over ADS.
type controlPlane struct {
	cache cache.SnapshotCache
	srv   *grpc.Server
	addr  string
	ver   int
}

func startControlPlane() (*controlPlane, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: control plane: %w", err)
	}
	cp := &controlPlane{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil), srv: grpc.NewServer(), addr: ln.Addr().String()}
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(cp.srv, server.NewServer(context.Background(), cp.cache, nil))
	go func() { _ = cp.srv.Serve(ln) }() // ends with stop
	return cp, nil
}

func (cp *controlPlane) stop() { cp.srv.Stop() }

// ControlPlane is the bench's loopback xDS server (go-control-plane's ADS
// server over a snapshot cache), for other benches and tests that need a
// gateway with one route to one cluster.
type ControlPlane struct{ cp *controlPlane }

// NewControlPlane starts one on a loopback port.
func NewControlPlane() (*ControlPlane, error) {
	cp, err := startControlPlane()
	if err != nil {
		return nil, err
	}
	return &ControlPlane{cp: cp}, nil
}

// Addr is the ADS address (host:port).
func (c *ControlPlane) Addr() string { return c.cp.addr }

// Publish serves, to node NodeID, a listener whose every path goes to one
// cluster of endpoints (host:port) balanced by policy, with timeout.
func (c *ControlPlane) Publish(policy string, endpoints []string, timeout time.Duration) error {
	return c.cp.set(proxyConfig{policy: policy, endpoints: endpoints, timeout: timeout})
}

// Stop stops the server.
func (c *ControlPlane) Stop() { c.cp.stop() }

// proxyConfig is what the bench's gateway serves: every path to one cluster.
type proxyConfig struct {
	policy    string   // balancer policy name
	endpoints []string // host:port
	timeout   time.Duration
	prefix    string // route prefix; "" is "/"
	// tlsPort and cert, when set, add the TLS listener on tlsPort and its
	// certificate (SDS), for the sextant-tls proxy.
	tlsPort uint32
	cert    *benchCert
	// mtls, with tlsPort, requires client certificates there and adds an
	// RBAC filter (tlsfigures.go).
	mtls *benchMTLS
	// grpcEndpoints, when set, add the cluster "grpc" (h2c to them) and a
	// route of the gRPC test service's prefix to it (dataplane.go).
	grpcEndpoints []string
	// node is the xDS node served (default NodeID): gateways of one run
	// with listeners of their own are told apart by it.
	node string
	// routes, when not routesOne, serves the 10 routes of issue 43's
	// header and CORS figure instead of prefix's one (filters.go).
	routes routeSet
}

func (cp *controlPlane) set(pc proxyConfig) error {
	cp.ver++
	res := map[resource.Type][]types.Resource{
		resource.ListenerType: {benchListener()},
		resource.RouteType:    {pc.routeConfig()},
		resource.ClusterType:  {benchCluster(pc.policy)},
		resource.EndpointType: {benchEndpoints(pc.endpoints)},
	}
	if len(pc.grpcEndpoints) > 0 {
		addGRPCRoute(res, pc.grpcEndpoints)
	}
	if pc.tlsPort != 0 && pc.mtls != nil {
		res[resource.ListenerType] = append(res[resource.ListenerType], benchMTLSListener(pc.tlsPort, pc.mtls))
		res[resource.SecretType] = []types.Resource{benchSecret(pc.cert), benchCASecret(pc.mtls.caPEM)}
	} else if pc.tlsPort != 0 {
		res[resource.ListenerType] = append(res[resource.ListenerType], benchTLSListener(pc.tlsPort))
		res[resource.SecretType] = []types.Resource{benchSecret(pc.cert)}
	}
	snap, err := cache.NewSnapshot(strconv.Itoa(cp.ver), res)
	if err != nil {
		return fmt.Errorf("bench: snapshot: %w", err)
	}
	return cp.cache.SetSnapshot(context.Background(), cmp.Or(pc.node, NodeID), snap)
}

func benchListener() *listener.Listener {
	m := &hcm.HttpConnectionManager{StatPrefix: "bench", RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
		RouteConfigName: "bench", ConfigSource: &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}}}}}
	a, _ := anypb.New(m)
	return &listener.Listener{Name: "bench", FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{
		Name: "envoy.filters.network.http_connection_manager", ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}}}}}
}

func benchRoutes(timeout time.Duration, prefix string) *route.RouteConfiguration {
	if prefix == "" {
		prefix = "/"
	}
	return benchRouteConfig(benchRoute(timeout, prefix))
}

// benchRoute sends paths under prefix to the cluster "upstream".
func benchRoute(timeout time.Duration, prefix string) *route.Route {
	return &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: prefix}},
		Action: &route.Route_Route{Route: &route.RouteAction{Timeout: durationpb.New(timeout),
			ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "upstream"}}}}
}

// benchRouteConfig is the listener's route configuration "bench": routes
// for any host.
func benchRouteConfig(routes ...*route.Route) *route.RouteConfiguration {
	return &route.RouteConfiguration{Name: "bench", VirtualHosts: []*route.VirtualHost{{Name: "all", Domains: []string{"*"},
		Routes: routes}}}
}

// benchCluster carries Sextant's policy as docs/gateway.md says: a
// TypedStruct in load_balancing_policy.
func benchCluster(policy string) *cluster.Cluster {
	ts, _ := anypb.New(&xdstype.TypedStruct{TypeUrl: balancer.XDSTypeURL(policy), Value: &structpb.Struct{}})
	svc, _ := structpb.NewStruct(map[string]any{"service": "bench"})
	return &cluster.Cluster{Name: "upstream", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig: &cluster.Cluster_EdsClusterConfig{EdsConfig: &core.ConfigSource{
			ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}}},
		ConnectTimeout: durationpb.New(time.Second),
		LbPolicy:       cluster.Cluster_LOAD_BALANCING_POLICY_CONFIG,
		LoadBalancingPolicy: &cluster.LoadBalancingPolicy{Policies: []*cluster.LoadBalancingPolicy_Policy{{
			TypedExtensionConfig: &core.TypedExtensionConfig{Name: "sextant.balancer", TypedConfig: ts}}}},
		Metadata: &core.Metadata{FilterMetadata: map[string]*structpb.Struct{gw.SextantMetadataKey: svc}},
	}
}

func benchEndpoints(addrs []string) *endpoint.ClusterLoadAssignment {
	var lbs []*endpoint.LbEndpoint
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		lbs = append(lbs, &endpoint.LbEndpoint{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: host,
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(p)}}}}}}})
	}
	return &endpoint.ClusterLoadAssignment{ClusterName: "upstream", Endpoints: []*endpoint.LocalityLbEndpoints{{LbEndpoints: lbs}}}
}
