package xds

import (
	"context"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// The shop's workloads call orders only; everything else is refused.
const scopeSidecar = `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
  egress:
  - hosts: ["./orders.shop.svc.cluster.local"]
`

// scopeServices are the services of the scoping tests, the first imported.
var scopeServices = []naming.ServiceKey{{Namespace: "shop", Name: "orders"}, {Namespace: "shop", Name: "payments"}, {Namespace: "other", Name: "x"}}

// proxyRoutes is the proxy's route configuration with one virtual host
// per service, as the push engine concatenates them; tag changes payments'.
func proxyRoutes(t *testing.T, tag string) Resource {
	out := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), ProxyName)
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	for _, s := range scopeServices {
		vh := VirtualHost(s.String(), config.Hostnames(s), s, nil, clusterFor, nil)
		if s.Name == "payments" {
			vh.Domains = append(vh.Domains, tag)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(vh)
		if err != nil {
			t.Fatal(err)
		}
		out = protowire.AppendBytes(protowire.AppendTag(out, 2, protowire.BytesType), b)
	}
	return Resource{Name: ProxyName, Version: "1", Value: out, Hidden: true}
}

func scopeCache(t *testing.T) *Cache {
	c, _ := scopeCacheObjs(t)
	return c
}

// scopeCacheObjs is scopeCache and the config objects it holds.
func scopeCacheObjs(t *testing.T) (*Cache, []*config.Object) {
	c := NewCache()
	var cls, eps []Resource
	for _, s := range scopeServices {
		for _, n := range []string{ClusterName(s, "", 0), ClusterName(s, "v1", 0)} {
			cls = append(cls, cluster(n, config.Policy{}))
			eps = append(eps, endpoints(n, 80))
		}
	}
	c.Apply(TypeCluster, cls, nil, "1", time.Now())
	c.Apply(TypeEndpoint, eps, nil, "1", time.Now())
	c.Apply(TypeRoute, []Resource{proxyRoutes(t, "a")}, nil, "1", time.Now())
	objs, err := config.Decode([]byte(scopeSidecar))
	if err != nil {
		t.Fatal(err)
	}
	c.SetSidecars(config.NewSidecars("", objs))
	return c, objs
}

// adsStream is one SotW stream whose responses a goroutine hands over,
// each ACKed, so a test can also tell that nothing came.
type adsStream struct {
	s  discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	ch chan *discoveryv3.DiscoveryResponse
}

func openScoped(t *testing.T, ctx context.Context, conn discoverygrpc.AggregatedDiscoveryServiceClient, ns string) *adsStream {
	t.Helper()
	return openScopedID(t, ctx, conn, ns, "n-"+ns)
}

func openScopedID(t *testing.T, ctx context.Context, conn discoverygrpc.AggregatedDiscoveryServiceClient, ns, id string) *adsStream {
	t.Helper()
	s, err := conn.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: id, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"NAMESPACE": structpb.NewStringValue(ns)}}}
	a := &adsStream{s: s, ch: make(chan *discoveryv3.DiscoveryResponse, 16)}
	var edsNames []string
	for _, sv := range scopeServices {
		edsNames = append(edsNames, ClusterName(sv, "", 0), ClusterName(sv, "v1", 0))
	}
	names := map[string][]string{TypeCluster.URL(): nil, TypeEndpoint.URL(): edsNames, TypeRoute.URL(): {ProxyName}}
	for _, u := range []string{TypeCluster.URL(), TypeEndpoint.URL(), TypeRoute.URL()} {
		if err := s.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: u, ResourceNames: names[u]}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		defer close(a.ch)
		for {
			r, err := s.Recv()
			if err != nil {
				return
			}
			s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce, ResourceNames: names[r.TypeUrl]})
			a.ch <- r
		}
	}()
	return a
}

// next is the next response, or nil when none comes within d.
func (a *adsStream) next(t *testing.T, d time.Duration) *discoveryv3.DiscoveryResponse {
	t.Helper()
	select {
	case r := <-a.ch:
		return r
	case <-time.After(d):
		return nil
	}
}

// resourceNames lists a response's resources by name (a route
// configuration's by its virtual hosts).
func resourceNames(t *testing.T, r *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.Resources {
		switch r.TypeUrl {
		case TypeCluster.URL():
			var c clusterv3.Cluster
			a.UnmarshalTo(&c)
			out = append(out, c.Name)
		case TypeEndpoint.URL():
			var c endpointv3.ClusterLoadAssignment
			a.UnmarshalTo(&c)
			out = append(out, c.ClusterName)
		case TypeRoute.URL():
			var rc routev3.RouteConfiguration
			if err := a.UnmarshalTo(&rc); err != nil {
				t.Fatal(err)
			}
			if err := rc.ValidateAll(); err != nil {
				t.Errorf("scoped route configuration does not validate: %v", err)
			}
			for _, vh := range rc.VirtualHosts {
				out = append(out, vh.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// firstOfEach reads responses until one of each type came.
func (a *adsStream) firstOfEach(t *testing.T) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for len(got) < 3 {
		r := a.next(t, 30*time.Second)
		if r == nil {
			t.Fatalf("got %v, then nothing", got)
		}
		got[r.TypeUrl] = resourceNames(t, r)
	}
	return got
}

// TestSidecarScopesSubscriber: a subscriber a Sidecar applies to is sent
// only the clusters, endpoints and virtual hosts of what it imports (and
// REGISTRY_ONLY's block_all), and a change to a service it does not import
// sends it nothing, while an unscoped subscriber is sent all of it.
func TestSidecarScopesSubscriber(t *testing.T) {
	c, objs := scopeCacheObjs(t)
	_, conn := startADS(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)

	shop := openScoped(t, ctx, ads, "shop")
	got := shop.firstOfEach(t)
	for u, want := range map[string][]string{
		TypeCluster.URL():  {"shop/orders", "shop/orders/v1"},
		TypeEndpoint.URL(): {"shop/orders", "shop/orders/v1"},
		TypeRoute.URL():    {BlockAllName, "shop/orders"},
	} {
		if !slices.Equal(got[u], want) {
			t.Errorf("scoped %s: %v, want %v", u, got[u], want)
		}
	}
	// An Istio gateway (router) in shop: no Sidecar applies to it.
	router := openScopedID(t, ctx, ads, "shop", "router~10.0.0.9~gw.shop~shop.svc.cluster.local")
	if got := router.firstOfEach(t); len(got[TypeCluster.URL()]) != 6 {
		t.Fatalf("a router was scoped: %v", got)
	}
	web := openScoped(t, ctx, ads, "web") // no Sidecar applies: everything
	got = web.firstOfEach(t)
	if n := len(got[TypeCluster.URL()]); n != 6 || len(got[TypeEndpoint.URL()]) != 6 || len(got[TypeRoute.URL()]) != 3 {
		t.Fatalf("unscoped: %v", got)
	}

	// Changes to services shop does not import: web gets each, shop none.
	c.Apply(TypeEndpoint, []Resource{endpoints("shop/payments", 81), endpoints("other/x/v1", 82)}, nil, "2", time.Now())
	c.Apply(TypeCluster, []Resource{cluster("other/x", config.Policy{ConnectTimeout: time.Second})}, nil, "2", time.Now())
	c.Apply(TypeRoute, []Resource{proxyRoutes(t, "b")}, nil, "2", time.Now())
	seen := map[string]bool{}
	for len(seen) < 3 {
		r := web.next(t, 30*time.Second)
		if r == nil {
			t.Fatalf("unscoped subscriber: got %v, then nothing", seen)
		}
		seen[r.TypeUrl] = true
	}
	if r := shop.next(t, 2*time.Second); r != nil {
		t.Fatalf("scoped subscriber sent %s %v for services it does not import", r.TypeUrl, resourceNames(t, r))
	}
	// One it imports: sent at once.
	c.Apply(TypeEndpoint, []Resource{endpoints("shop/orders", 83)}, nil, "3", time.Now())
	r := shop.next(t, 30*time.Second)
	if r == nil || r.TypeUrl != TypeEndpoint.URL() || !slices.Equal(resourceNames(t, r), []string{"shop/orders"}) {
		t.Fatalf("scoped subscriber after an imported change: %v", r)
	}

	// Another config's change (a ServiceEntry) leaves the Sidecar, and
	// what shop is sent, as they were: nothing is sent again.
	se, err := config.Decode([]byte("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: other}\nspec: {hosts: [api.partner.io], resolution: DNS, ports: [{number: 80, name: http, protocol: HTTP}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetSidecars(config.NewSidecars("", append(slices.Clone(objs), se...)))
	if r := shop.next(t, 2*time.Second); r != nil {
		t.Fatalf("scoped subscriber sent %s %v again after a ServiceEntry change", r.TypeUrl, resourceNames(t, r))
	}

	// The Sidecar goes: shop is sent what it was not.
	c.SetSidecars(config.NewSidecars("", nil))
	seen = map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for !seen["payments-cluster"] || !seen["payments-vhost"] {
		r := shop.next(t, time.Until(deadline))
		if r == nil {
			t.Fatalf("after the Sidecar went: %v", seen)
		}
		for _, n := range resourceNames(t, r) {
			switch {
			case r.TypeUrl == TypeCluster.URL() && n == "shop/payments":
				seen["payments-cluster"] = true
			case r.TypeUrl == TypeRoute.URL() && n == "shop/payments":
				seen["payments-vhost"] = true
			case n == BlockAllName:
				t.Errorf("block_all sent without a Sidecar")
			}
		}
	}
}

// TestSidecarAllowAny: with ALLOW_ANY a service the Sidecar does not
// import keeps its whole-service cluster and a virtual host that routes
// every call there (passthrough), without its subsets.
func TestSidecarAllowAny(t *testing.T) {
	c := scopeCache(t)
	objs, err := config.Decode([]byte(scopeSidecar[:len(scopeSidecar)-len("  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n  egress:\n  - hosts: [\"./orders.shop.svc.cluster.local\"]\n")] +
		"  outboundTrafficPolicy: {mode: ALLOW_ANY}\n  egress:\n  - hosts: [\"./orders.shop.svc.cluster.local\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetSidecars(config.NewSidecars("", objs))
	_, conn := startADS(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shop := openScoped(t, ctx, discoverygrpc.NewAggregatedDiscoveryServiceClient(conn), "shop")
	got := shop.firstOfEach(t)
	if want := []string{"other/x", "shop/orders", "shop/orders/v1", "shop/payments"}; !slices.Equal(got[TypeCluster.URL()], want) {
		t.Errorf("clusters %v, want %v", got[TypeCluster.URL()], want)
	}
	if want := []string{"other/x", "shop/orders", "shop/payments"}; !slices.Equal(got[TypeRoute.URL()], want) {
		t.Errorf("virtual hosts %v, want %v", got[TypeRoute.URL()], want)
	}
}
