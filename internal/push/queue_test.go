package push

import (
	"bytes"
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestEndpointQueueIdle: config work waits while endpoint work is queued or
// being computed, at most the time it is given, and not at all when there
// is none.
func TestEndpointQueueIdle(t *testing.T) {
	var q endpointQueue
	q.init()
	ctx := context.Background()
	start := time.Now()
	q.waitIdle(ctx, time.Hour) // idle: returns at once
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("idle queue held config work %v", took)
	}
	s := naming.ServiceKey{Namespace: "default", Name: "orders"}
	q.mark(s, time.Now())
	start = time.Now()
	q.waitIdle(ctx, 30*time.Millisecond)
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("queued endpoint work held config work only %v", took)
	}
	if _, _, ok := q.take(); !ok {
		t.Fatal("nothing to take")
	}
	// Taken but not finished: still busy until a take finds it empty.
	done := make(chan struct{})
	go func() { q.waitIdle(ctx, time.Hour); close(done) }()
	select {
	case <-done:
		t.Fatal("config work went on while endpoint work was running")
	case <-time.After(20 * time.Millisecond):
	}
	if _, _, ok := q.take(); ok {
		t.Fatal("took a second time")
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("config work still waits once endpoint work is done")
	}
}

// TestSplitVirtualHost: a virtual host encoded once and given its domains
// afterwards is byte for byte the deterministic encoding of the virtual
// host with those domains, and the route configuration built around it that
// of the RouteConfiguration.
func TestSplitVirtualHost(t *testing.T) {
	vh := &routev3.VirtualHost{Name: "default/orders", Routes: []*routev3.Route{{Name: "r",
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "default/orders"}}}}},
		Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"sextant": {Fields: map[string]*structpb.Value{"dropped_routes": structpb.NewStringValue("x")}}}}}
	head, rest, err := splitName(vh)
	if err != nil {
		t.Fatal(err)
	}
	det := proto.MarshalOptions{Deterministic: true}
	domains := []string{"orders", "orders.default", "orders.default.svc"}
	want := proto.Clone(vh).(*routev3.VirtualHost)
	want.Domains = domains
	wb, _ := det.Marshal(want)
	if got := withDomains(head, rest, domains); !bytes.Equal(got, wb) {
		t.Fatalf("virtual host:\n got %x\nwant %x", got, wb)
	}
	if _, _, err := splitName(want); err == nil {
		t.Fatal("split a virtual host with domains")
	}
	// The route configuration as build makes it.
	star := proto.Clone(vh).(*routev3.VirtualHost)
	star.Domains = []string{"*"}
	rb, _ := det.Marshal(xds.RouteConfiguration("default/orders", star))
	var rc routev3.RouteConfiguration
	got := routeConfiguration("default/orders", withDomains(head, rest, []string{"*"}))
	if !bytes.Equal(got, rb) || proto.Unmarshal(got, &rc) != nil || !proto.Equal(&rc, xds.RouteConfiguration("default/orders", star)) {
		t.Fatalf("route configuration:\n got %x\nwant %x", got, rb)
	}
}
