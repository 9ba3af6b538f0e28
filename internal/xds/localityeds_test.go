package xds

import (
	"context"
	"maps"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	topo "github.com/sextant-mesh/sextant/internal/locality"
)

// A subscriber that says where it runs (Node.locality) gets Istio's
// priorities from there; a subscriber that does not gets every locality at
// priority 0, as published; both by state of the world and by delta.
func TestEDSLocalityPriorities(t *testing.T) {
	zone := func(z string) label.Labels {
		return label.FromMap(map[string]string{"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": z})
	}
	eps := []Endpoint{
		{ID: "a", Host: "10.0.0.1", Port: 80, Weight: 1, Healthy: true, Metadata: zone("a")},
		{ID: "b", Host: "10.0.0.2", Port: 80, Weight: 1, Healthy: true, Metadata: zone("b")},
		{ID: "c", Host: "10.0.0.3", Port: 80, Weight: 1, Healthy: true, Metadata: label.FromMap(map[string]string{"region": "r2"})},
	}
	c := NewCache()
	c.Apply(TypeEndpoint, []Resource{{Name: "svc", Version: "1", Message: LoadAssignment("svc", eps)}}, nil, "1", time.Now())
	_, conn := startADS(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)

	// decode maps each locality's zone (or region) to its priority.
	decode := func(t *testing.T, cla *endpointv3.ClusterLoadAssignment) map[string]uint32 {
		out := map[string]uint32{}
		for _, le := range cla.Endpoints {
			k := le.GetLocality().GetZone()
			if k == "" {
				k = le.GetLocality().GetRegion()
			}
			out[k] = le.GetPriority()
		}
		return out
	}
	for _, tc := range []struct {
		name string
		loc  *corev3.Locality
		want map[string]uint32
	}{
		{name: "zone b", loc: &corev3.Locality{Region: "r1", Zone: "b"}, want: map[string]uint32{"a": 1, "b": 0, "r2": 2}},
		{name: "region r2", loc: &corev3.Locality{Region: "r2"}, want: map[string]uint32{"a": 1, "b": 1, "r2": 0}},
		{name: "nowhere", want: map[string]uint32{"a": 0, "b": 0, "r2": 0}},
	} {
		t.Run(tc.name+"/sotw", func(t *testing.T) {
			s, err := ads.StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n", Locality: tc.loc}, TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"svc"}})
			r := recv(t, s)
			var cla endpointv3.ClusterLoadAssignment
			if len(r.Resources) != 1 || r.Resources[0].UnmarshalTo(&cla) != nil {
				t.Fatalf("EDS: %v", r.Resources)
			}
			if got := decode(t, &cla); !maps.Equal(got, tc.want) {
				t.Fatalf("priorities %v, want %v", got, tc.want)
			}
			s.CloseSend()
		})
		t.Run(tc.name+"/delta", func(t *testing.T) {
			s, err := ads.DeltaAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Locality: tc.loc}, TypeUrl: TypeEndpoint.URL(), ResourceNamesSubscribe: []string{"svc"}})
			r, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			var cla endpointv3.ClusterLoadAssignment
			if len(r.Resources) != 1 || r.Resources[0].GetResource().UnmarshalTo(&cla) != nil {
				t.Fatalf("EDS: %v", r.Resources)
			}
			if got := decode(t, &cla); !maps.Equal(got, tc.want) {
				t.Fatalf("priorities %v, want %v", got, tc.want)
			}
			s.CloseSend()
		})
	}
}

// A cluster's localityLbSetting changing alone (the same endpoints) is a
// new version: enabled false sends the shared assignment, failover
// reorders the regions.
func TestEDSLocalityRules(t *testing.T) {
	region := func(r string) label.Labels { return label.FromMap(map[string]string{"region": r}) }
	eps := []Endpoint{
		{ID: "a", Host: "10.0.0.1", Port: 80, Weight: 1, Healthy: true, Metadata: region("r1")},
		{ID: "b", Host: "10.0.0.2", Port: 80, Weight: 1, Healthy: true, Metadata: region("r2")},
		{ID: "c", Host: "10.0.0.3", Port: 80, Weight: 1, Healthy: true, Metadata: region("r3")},
	}
	c := NewCache()
	apply := func(v string, rules *topo.Rules) {
		if _, err := c.Apply(TypeEndpoint, []Resource{{Name: "svc", Version: v, Message: LoadAssignment("svc", eps), Locality: rules}}, nil, v, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	apply("1", nil)
	_, conn := startADS(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n", Locality: &corev3.Locality{Region: "r1"}}, TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"svc"}})
	next := func() map[string]uint32 {
		t.Helper()
		r := recv(t, s)
		var cla endpointv3.ClusterLoadAssignment
		if len(r.Resources) != 1 || r.Resources[0].UnmarshalTo(&cla) != nil {
			t.Fatalf("EDS: %v", r.Resources)
		}
		s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"svc"}, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
		out := map[string]uint32{}
		for _, le := range cla.Endpoints {
			out[le.GetLocality().GetRegion()] = le.GetPriority()
		}
		return out
	}
	if got, want := next(), map[string]uint32{"r1": 0, "r2": 1, "r3": 1}; !maps.Equal(got, want) {
		t.Fatalf("defaults: %v, want %v", got, want)
	}
	apply("2", &topo.Rules{Failover: []topo.Failover{{From: "r1", To: "r3"}}})
	if got, want := next(), map[string]uint32{"r1": 0, "r2": 2, "r3": 1}; !maps.Equal(got, want) {
		t.Fatalf("failover r1 -> r3: %v, want %v", got, want)
	}
	apply("3", &topo.Rules{Off: true})
	if got, want := next(), map[string]uint32{"r1": 0, "r2": 0, "r3": 0}; !maps.Equal(got, want) {
		t.Fatalf("enabled false: %v, want %v", got, want)
	}
}

// distribute tells Envoy to follow locality weights (lb_policy clusters);
// failover alone does not.
func TestClusterLocalityWeighted(t *testing.T) {
	d := &topo.Rules{Distribute: []topo.Distribute{{From: "r1", To: []topo.Share{{Pattern: "r1", Weight: 100}}}}}
	c := Cluster("c", config.Policy{Locality: d})
	if err := c.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	if c.GetCommonLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Fatalf("distribute: no locality_weighted_lb_config: %v", c.GetCommonLbConfig())
	}
	if c := Cluster("c", config.Policy{Locality: &topo.Rules{Failover: []topo.Failover{{From: "r1", To: "r2"}}}}); c.GetCommonLbConfig() != nil {
		t.Fatalf("failover: common_lb_config %v", c.GetCommonLbConfig())
	}
}
