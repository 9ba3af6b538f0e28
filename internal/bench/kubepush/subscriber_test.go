package kubepush

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The subscriber reads responses with protowire: its field paths checked
// against the real Envoy messages, as istiod and Sextant encode them.
func TestReadResources(t *testing.T) {
	c := &clusterv3.Cluster{
		Name:                 "outbound|8080|blue|svc-0001.bench.svc.cluster.local",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{ServiceName: "eds-name"},
		OutlierDetection:     &clusterv3.OutlierDetection{Consecutive_5Xx: wrapperspb.UInt32(77)},
	}
	b, _ := proto.Marshal(c)
	got, err := parseCluster(b)
	if err != nil || got.name != c.Name || got.edsName != "eds-name" || !got.eds || got.consecutive5x != 77 {
		t.Errorf("parseCluster: %+v, %v", got, err)
	}
	if !serviceIn(got.name, "svc-0001") || serviceIn(got.name, "svc-0002") || !serviceIn("bench/svc-0001/blue", "svc-0001") || !serviceIn("bench/svc-0001", "svc-0001") {
		t.Error("serviceIn")
	}

	hcm, _ := anypb.New(&hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "8080"}}})
	api, _ := anypb.New(&hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "api"}}})
	l := &listenerv3.Listener{
		Name:         "0.0.0.0_8080",
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{Name: "hcm", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm}}}}},
		ApiListener:  &listenerv3.ApiListener{ApiListener: api},
	}
	b, _ = proto.Marshal(l)
	names := map[string]bool{}
	if err := routeNames(b, names); err != nil || !names["8080"] || !names["api"] || len(names) != 2 {
		t.Errorf("routeNames: %v, %v", names, err)
	}

	sock := func(a string) *endpointv3.LbEndpoint {
		return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: a}}}}}}
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: "bench/svc-0001/blue", Endpoints: []*endpointv3.LocalityLbEndpoints{
		{LbEndpoints: []*endpointv3.LbEndpoint{sock("10.128.0.1")}}, {LbEndpoints: []*endpointv3.LbEndpoint{sock("10.128.0.2")}}}}
	b, _ = proto.Marshal(cla)
	var addrs []string
	if err := claAddresses(b, func(v []byte) { addrs = append(addrs, string(v)) }); err != nil || len(addrs) != 2 || addrs[1] != "10.128.0.2" {
		t.Errorf("claAddresses: %v, %v", addrs, err)
	}
	if n := claName(b); n != cla.ClusterName {
		t.Errorf("claName: %q", n)
	}
}
