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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/label"
	topo "github.com/sextant-mesh/sextant/internal/locality"
)

// TestEDSFailoverPriority: a subscriber is sent the endpoints in
// priorities by failoverPriority from its own labels and locality (the
// tier label first, then the zone), one locality split where its
// endpoints differ, without the labels' metadata; combined with failover
// as istiod combines them; a subscriber without labels or locality gets
// every endpoint at priority 0.
func TestEDSFailoverPriority(t *testing.T) {
	ep := func(id, host, zone, tier string) Endpoint {
		return Endpoint{ID: id, Host: host, Port: 80, Weight: 1, Healthy: true, Metadata: label.FromMap(map[string]string{
			"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": zone, "tier": tier})}
	}
	eps := []Endpoint{
		ep("a1", "10.0.0.1", "a", "silver"), ep("a2", "10.0.0.2", "a", "gold"),
		ep("b", "10.0.0.3", "b", "gold"), ep("c", "10.0.0.4", "c", "silver"),
	}
	rules := &topo.Rules{FailoverPriority: []string{"tier", "topology.kubernetes.io/zone"}}
	c := NewCache()
	if _, err := c.Apply(TypeEndpoint, []Resource{{Name: "svc", Version: "1", Message: LoadAssignmentFor("svc", eps, rules), Locality: rules}}, nil, "1", time.Now()); err != nil {
		t.Fatal(err)
	}
	_, conn := startADS(t, c)
	for _, tc := range []struct {
		name   string
		node   *corev3.Node
		want   map[string]uint32 // address -> priority
		splits int               // LocalityLbEndpoints
	}{
		{"gold in zone a", &corev3.Node{Id: "n1", Locality: &corev3.Locality{Region: "r1", Zone: "a"}, Metadata: labelsMeta(map[string]string{"tier": "gold"})},
			map[string]uint32{"10.0.0.2": 0, "10.0.0.3": 1, "10.0.0.1": 2, "10.0.0.4": 2}, 4},
		{"silver in zone c", &corev3.Node{Id: "n2", Locality: &corev3.Locality{Region: "r1", Zone: "c"}, Metadata: labelsMeta(map[string]string{"tier": "silver"})},
			map[string]uint32{"10.0.0.4": 0, "10.0.0.1": 1, "10.0.0.2": 2, "10.0.0.3": 2}, 4},
		{"nothing known", &corev3.Node{Id: "n3"},
			map[string]uint32{"10.0.0.1": 0, "10.0.0.2": 0, "10.0.0.3": 0, "10.0.0.4": 0}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.Send(&discoveryv3.DiscoveryRequest{Node: tc.node, TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"svc"}})
			r := recv(t, s)
			var cla endpointv3.ClusterLoadAssignment
			if len(r.Resources) != 1 || r.Resources[0].UnmarshalTo(&cla) != nil {
				t.Fatalf("EDS: %v", r.Resources)
			}
			got := map[string]uint32{}
			last := uint32(0)
			for _, le := range cla.Endpoints {
				if le.Priority < last {
					t.Errorf("priorities not in order: %v", cla.Endpoints)
				}
				last = le.Priority
				for _, lb := range le.LbEndpoints {
					got[lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = le.Priority
					if lb.Metadata != nil {
						t.Errorf("metadata left: %v", lb.Metadata)
					}
				}
			}
			if !maps.Equal(got, tc.want) || len(cla.Endpoints) != tc.splits {
				t.Errorf("priorities %v in %d localities, want %v in %d", got, len(cla.Endpoints), tc.want, tc.splits)
			}
		})
	}
}

// TestFailoverPriorityWithFailover: with failover as well, the locality's
// priority orders endpoints within each failoverPriority level (5 x level +
// locality priority, made dense), as istiod's applyLocalityFailover after
// applyFailoverPriorities.
func TestFailoverPriorityWithFailover(t *testing.T) {
	ep := func(host, region, tier string) Endpoint {
		return Endpoint{ID: host, Host: host, Port: 80, Weight: 1, Healthy: true, Metadata: label.FromMap(map[string]string{
			"topology.kubernetes.io/region": region, "tier": tier})}
	}
	eps := []Endpoint{ep("10.0.0.1", "r1", "gold"), ep("10.0.0.2", "r2", "gold"), ep("10.0.0.3", "r3", "gold"), ep("10.0.0.4", "r1", "silver")}
	rules := &topo.Rules{FailoverPriority: []string{"tier"}, Failover: []topo.Failover{{From: "r1", To: "r3"}}}
	b, err := proto.Marshal(LoadAssignmentFor("svc", eps, rules))
	if err != nil {
		t.Fatal(err)
	}
	e := newEntry(TypeEndpoint, &Resource{Name: "svc", Version: "1", Locality: rules}, b, 1, 1, time.Now())
	v := failoverVariant(e, topo.Locality{Region: "r1"}, map[string]string{"tier": "gold"})
	var cla endpointv3.ClusterLoadAssignment
	if err := proto.Unmarshal(v.value, &cla); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint32{}
	for _, le := range cla.Endpoints {
		for _, lb := range le.LbEndpoints {
			got[lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = le.Priority
		}
	}
	// gold r1 0; gold r3 (failover's to) 1; gold r2 (not allowed) 2; silver r1 3.
	if want := map[string]uint32{"10.0.0.1": 0, "10.0.0.3": 1, "10.0.0.2": 2, "10.0.0.4": 3}; !maps.Equal(got, want) {
		t.Errorf("priorities %v, want %v", got, want)
	}
}

func labelsMeta(m map[string]string) *structpb.Struct {
	ls := map[string]any{}
	for k, v := range m {
		ls[k] = v
	}
	s, _ := structpb.NewStruct(map[string]any{"LABELS": ls})
	return s
}
