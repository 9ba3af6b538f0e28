package push_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// serverStream is a bare ADS stream asking for one server listener, as
// grpc-go's xDS server does.
type serverStream struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *corev3.Node
	name   string
}

func openServerStream(t *testing.T, ctx context.Context, cp *controlPlane, ns, addr string) *serverStream {
	t.Helper()
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &serverStream{t: t, stream: st, name: xds.ServerListenerPrefix + addr,
		node: &corev3.Node{Id: "srv", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"NAMESPACE": structpb.NewStringValue(ns)}}}}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: xds.TypeListener.URL(), ResourceNames: []string{s.name}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// next reads the next listener and ACKs it; it returns the names of its
// chains and of its HTTP filters.
func (s *serverStream) next() (chains, filters []string) {
	s.t.Helper()
	type recv struct {
		r   *discoveryv3.DiscoveryResponse
		err error
	}
	got := make(chan recv, 1)
	go func() {
		r, err := s.stream.Recv()
		got <- recv{r, err}
	}()
	var r *discoveryv3.DiscoveryResponse
	select {
	case g := <-got:
		if g.err != nil {
			s.t.Fatal(g.err)
		}
		r = g.r
	case <-time.After(time.Minute):
		// The Recv goroutine ends when the test's context cancels the stream.
		s.t.Fatal("no listener pushed within a minute")
	}
	if err := s.stream.Send(&discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: r.TypeUrl, ResourceNames: []string{s.name},
		VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce}); err != nil {
		s.t.Fatal(err)
	}
	if len(r.Resources) != 1 {
		s.t.Fatalf("%d listeners", len(r.Resources))
	}
	l := &listenerv3.Listener{}
	if err := r.Resources[0].UnmarshalTo(l); err != nil {
		s.t.Fatal(err)
	}
	for _, fc := range l.FilterChains {
		chains = append(chains, fc.Name)
	}
	h := &hcmv3.HttpConnectionManager{}
	if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(h); err != nil {
		s.t.Fatal(err)
	}
	for _, f := range h.HttpFilters {
		filters = append(filters, f.Name)
	}
	return chains, filters
}

const nsPolicies = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: default}
spec: {mtls: {mode: STRICT}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: orders, namespace: default}
spec:
  selector: {matchLabels: {app: orders}}
  rules: [{from: [{source: {namespaces: [web]}}]}]
`

// TestServerListenerFollowsWorkload: a server listener is built for the
// instance registered at its address and rebuilt when that instance's
// labels change; a server on 0.0.0.0 gets its node namespace's policies
// without a selector; a listener no subscriber names is dropped at the
// next policy change once its grace is over.
func TestServerListenerFollowsWorkload(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := registryWith(t, nsPolicies)
	at := func(app string) *instance.Instance {
		return &instance.Instance{ID: "orders-1", Namespace: "default", Service: "orders", Host: "10.0.0.7", Port: 8080,
			Weight: 100, Healthy: true, Metadata: label.FromMap(map[string]string{"app": app})}
	}
	reg.Upsert(at("orders"))
	cp := startControlPlane(t, ctx, reg, nil)

	s := openServerStream(t, ctx, cp, "default", "10.0.0.7:8080")
	chains, filters := s.next()
	if strings.Join(chains, ",") != xds.InboundMTLSChain || strings.Join(filters, ",") != xds.RBACAllowFilter+",envoy.filters.http.router" {
		t.Fatalf("selected workload: chains %v filters %v", chains, filters)
	}
	// Its labels change: the policy no longer selects it.
	reg.Upsert(at("billing"))
	if _, filters := s.next(); strings.Join(filters, ",") != "envoy.filters.http.router" {
		t.Fatalf("after the label change: filters %v", filters)
	}

	// 0.0.0.0: the node's namespace, no labels.
	any := openServerStream(t, ctx, cp, "default", "0.0.0.0:9090")
	if chains, filters := any.next(); strings.Join(chains, ",") != xds.InboundMTLSChain || strings.Join(filters, ",") != "envoy.filters.http.router" {
		t.Fatalf("0.0.0.0: chains %v filters %v", chains, filters)
	}

	// The 0.0.0.0 server goes; a policy change drops its listener.
	push.SetServerGrace(0)
	defer push.SetServerGrace(time.Minute)
	any.stream.CloseSend()
	key := any.name + "\x00default"
	waitFor(t, func() bool {
		reg.ApplyConfig(mustDecode(t, strings.Replace(nsPolicies, "namespaces: [web]", "namespaces: [web, batch]", 1))[1])
		_, _, ok := cp.cache.Get(xds.TypeListener, key)
		return !ok
	})
	if _, _, ok := cp.cache.Get(xds.TypeListener, s.name+"\x00default"); !ok {
		t.Fatal("the listener of the server still subscribed was dropped too")
	}
}

// TestRootNamespace: a PeerAuthentication in the mesh's root namespace
// applies to every namespace's servers, and the root is the engine's
// RootNamespace (sextant server --mesh-root-namespace), not istio-system
// then.
func TestRootNamespace(t *testing.T) {
	const meshWide = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: mesh-config}
spec: {mtls: {mode: STRICT}}
`
	for _, tc := range []struct {
		root, chains string
	}{
		{"mesh-config", xds.InboundMTLSChain},
		{"", xds.InboundMTLSChain + "," + xds.InboundPlaintextChain}, // istio-system: the policy is mesh-config's own
	} {
		t.Run("root="+tc.root, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			reg := registryWith(t, meshWide)
			cp := startControlPlaneWith(t, ctx, reg, push.Options{RootNamespace: tc.root}, nil)
			if chains, _ := openServerStream(t, ctx, cp, "default", "0.0.0.0:9090").next(); strings.Join(chains, ",") != tc.chains {
				t.Fatalf("chains %v, want %s", chains, tc.chains)
			}
		})
	}
}

func mustDecode(t *testing.T, yaml string) []*config.Object {
	t.Helper()
	objs, err := config.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestNewServerWaitsForCommittedPolicies: a server that asks for its
// listener right after a PeerAuthentication is committed, while the
// config worker still debounces it, gets the new mode, not the one before.
func TestNewServerWaitsForCommittedPolicies(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := registryWith(t, ordersConfig)
	cp := &controlPlane{reg: reg, cache: xds.NewCache()}
	cp.engine = push.New(reg, cp.cache, push.Options{Debounce: 300 * time.Millisecond, DebounceMax: 300 * time.Millisecond})
	cp.ads = xds.NewServer(cp.cache, xds.ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = lis.Addr().String()
	done := make(chan struct{}, 2)
	go func() { cp.engine.Run(ctx); done <- struct{}{} }()
	go func() { cp.ads.Serve(ctx, lis); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()
	waitFor(t, func() bool { return cp.engine.Status().FullEndpointsMS > 0 })

	reg.ApplyConfig(mustDecode(t, nsPolicies)[0]) // STRICT for namespace default
	s := openServerStream(t, ctx, cp, "default", "10.0.0.9:8080")
	if chains, _ := s.next(); strings.Join(chains, ",") != xds.InboundMTLSChain {
		t.Fatalf("the first listener after a STRICT apply has chains %v", chains)
	}
}
