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

	"github.com/sextant-mesh/sextant/internal/label"
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
