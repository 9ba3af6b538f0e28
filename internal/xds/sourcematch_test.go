package xds

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// Istio's reviews-to-ratings rule by caller (samples' virtual-service-
// ratings-test-delay style): reviews v2 in "default" is sent the first
// route, any caller in "team" the second, everyone the last.
const sourceVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings, namespace: default}
spec:
  hosts: [ratings]
  http:
  - name: from-reviews-v2
    match: [{sourceLabels: {app: reviews, version: v2}, sourceNamespace: default}]
    route: [{destination: {host: ratings, subset: v2}}]
  - name: from-team
    match: [{sourceNamespace: team}]
    route: [{destination: {host: ratings, subset: v3}}]
  - name: rest
    route: [{destination: {host: ratings, subset: v1}}]
`

// TestSourceMatchPerSubscriber: a route matched by sourceLabels and
// sourceNamespace goes only to subscribers whose node (metadata LABELS,
// NAMESPACE) matches, as Istio builds a proxy's routes, by state of the
// world and by delta; the source metadata itself is not sent; the route
// configuration as published passes go-control-plane's validation and the
// hand encoder agrees with the messages.
func TestSourceMatchPerSubscriber(t *testing.T) {
	objs, err := config.Decode([]byte(sourceVS))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "ratings"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	vh := VirtualHost("ratings", []string{"ratings"}, svc, objs[0], clusterFor, nil)
	rc := RouteConfiguration("default/ratings", vh)
	if err := rc.ValidateAll(); err != nil {
		t.Fatalf("does not validate: %v", err)
	}
	enc, err := EncodeVirtualHost("ratings", svc, objs[0], clusterFor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("ratings", nil, svc, objs[0], clusterFor, nil)); !bytes.Equal(enc, msg) {
		t.Fatal("hand encoder and messages differ")
	}
	c := NewCache()
	c.Apply(TypeRoute, []Resource{{Name: "default/ratings", Version: "1", Message: rc}}, nil, "1", time.Now())
	_, conn := startADS(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)

	node := func(ns string, labels map[string]any) *corev3.Node {
		f := map[string]*structpb.Value{}
		if ns != "" {
			f["NAMESPACE"] = structpb.NewStringValue(ns)
		}
		if labels != nil {
			s, _ := structpb.NewStruct(labels)
			f["LABELS"] = structpb.NewStructValue(s)
		}
		return &corev3.Node{Id: "n", Metadata: &structpb.Struct{Fields: f}}
	}
	names := func(t *testing.T, rc *routev3.RouteConfiguration) []string {
		var out []string
		for _, r := range rc.VirtualHosts[0].Routes {
			if r.Metadata != nil {
				t.Errorf("route %s sent with its metadata %v", r.Name, r.Metadata)
			}
			out = append(out, r.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		node *corev3.Node
		want []string
	}{
		{"reviews-v2", node("default", map[string]any{"app": "reviews", "version": "v2", "pod-template-hash": "x"}), []string{"from-reviews-v2", "rest"}},
		{"reviews-v1", node("default", map[string]any{"app": "reviews", "version": "v1"}), []string{"rest"}},
		{"reviews-v2-elsewhere", node("other", map[string]any{"app": "reviews", "version": "v2"}), []string{"rest"}},
		{"team", node("team", nil), []string{"from-team", "rest"}},
		{"no-labels", node("", nil), []string{"rest"}},
	} {
		t.Run(tc.name+"/sotw", func(t *testing.T) {
			s, err := ads.StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.Send(&discoveryv3.DiscoveryRequest{Node: tc.node, TypeUrl: TypeRoute.URL(), ResourceNames: []string{"default/ratings"}})
			r := recv(t, s)
			var got routev3.RouteConfiguration
			if len(r.Resources) != 1 || r.Resources[0].UnmarshalTo(&got) != nil {
				t.Fatalf("RDS: %v", r.Resources)
			}
			if n := names(t, &got); !slices.Equal(n, tc.want) {
				t.Fatalf("routes %v, want %v", n, tc.want)
			}
			s.CloseSend()
		})
		t.Run(tc.name+"/delta", func(t *testing.T) {
			s, err := ads.DeltaAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: tc.node, TypeUrl: TypeRoute.URL(), ResourceNamesSubscribe: []string{"default/ratings"}})
			r, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			var got routev3.RouteConfiguration
			if len(r.Resources) != 1 || r.Resources[0].GetResource().UnmarshalTo(&got) != nil {
				t.Fatalf("delta RDS: %v", r.Resources)
			}
			if n := names(t, &got); !slices.Equal(n, tc.want) {
				t.Fatalf("routes %v, want %v", n, tc.want)
			}
			s.CloseSend()
		})
	}
}

// TestSourceMatchRefused: source fields are checked at apply.
func TestSourceMatchRefused(t *testing.T) {
	_, err := config.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - match: [{sourceLabels: {"bad key!": x}, sourceNamespace: Not_A_Label}]
    route: [{destination: {host: ratings}}]
`))
	if err == nil {
		t.Fatal("applied")
	}
	for _, want := range []string{"sourceLabels", "sourceNamespace"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("%v: does not name %s", err, want)
		}
	}
}
