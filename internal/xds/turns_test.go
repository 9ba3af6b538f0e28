package xds

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// recvTimeout reads one response, or nil when none comes within d.
func recvTimeout(t *testing.T, s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, d time.Duration) *discoveryv3.DiscoveryResponse {
	t.Helper()
	ch := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		r, err := s.Recv()
		if err != nil {
			r = nil
		}
		ch <- r
	}()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		return <-ch // the caller ends the stream; Recv then returns
	}
}

// A large state-of-the-world cluster list waits for a turn, held until the
// client holding it answers; meanwhile the waiting subscriber's endpoint
// changes still go.
func TestLargeResponsesTakeTurns(t *testing.T) {
	c := NewCache()
	c.Apply(TypeCluster, bigClusters(), nil, "1", time.Now())
	c.Apply(TypeEndpoint, []Resource{endpoints("cA", 80)}, nil, "1", time.Now())
	srv, conn := startADS(t, c)
	srv.turns = &turns{hold: time.Minute, free: 1}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)

	a, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: TypeCluster.URL()})
	ra := recv(t, a) // a holds the only turn: it does not answer yet

	b, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "b"}, TypeUrl: TypeCluster.URL()})
	b.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"cA"}})
	rb := recv(t, b)
	if rb.TypeUrl != TypeEndpoint.URL() {
		t.Fatalf("b's first response is %s, want its endpoints while a holds the turn", rb.TypeUrl)
	}
	// An endpoint change reaches b while its cluster list still waits.
	c.Apply(TypeEndpoint, []Resource{endpoints("cA", 81)}, nil, "2", time.Now())
	b.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"cA"}, ResponseNonce: rb.Nonce, VersionInfo: rb.VersionInfo})
	rb = recv(t, b)
	if rb.TypeUrl != TypeEndpoint.URL() {
		t.Fatalf("b got %s while a holds the only turn", rb.TypeUrl)
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := rb.Resources[0].UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	if port := cla.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().GetPortValue(); port != 81 {
		t.Fatalf("b's endpoints have port %d, want the change's 81", port)
	}
	// a answers: the turn passes to b, which gets its cluster list.
	a.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeCluster.URL(), ResponseNonce: ra.Nonce, VersionInfo: ra.VersionInfo})
	r := recvTimeout(t, b, 30*time.Second)
	if r == nil || r.TypeUrl != TypeCluster.URL() || len(r.Resources) != 64 {
		t.Fatalf("b did not get the cluster list once a answered: %v", r)
	}
}

// A turn whose client never answers ends after its hold.
func TestTurnExpires(t *testing.T) {
	c := NewCache()
	c.Apply(TypeCluster, bigClusters(), nil, "1", time.Now())
	srv, conn := startADS(t, c)
	srv.turns = &turns{hold: 200 * time.Millisecond, free: 1}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	// start is before a asks: a's turn begins after it, however late (on
	// a loaded machine) a's list arrives here.
	start := time.Now()
	a, _ := client.StreamAggregatedResources(ctx)
	a.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "a"}, TypeUrl: TypeCluster.URL()})
	recv(t, a) // never answered
	b, _ := client.StreamAggregatedResources(ctx)
	b.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "b"}, TypeUrl: TypeCluster.URL()})
	r := recvTimeout(t, b, 30*time.Second)
	if r == nil || r.TypeUrl != TypeCluster.URL() {
		t.Fatalf("b did not get the cluster list after a's turn expired: %v", r)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("b got the cluster list after %v, before a's turn could expire", took)
	}
}

// A turn granted but expired before its subscriber came for it (its send
// goroutine did not run in time) puts that subscriber back at the head of
// the line, ahead of those that asked after it.
func TestExpiredGrantKeepsPlace(t *testing.T) {
	newSub := func() *subscriber { return &subscriber{wake: make(chan struct{}, 1)} }
	tu := &turns{hold: time.Hour, free: 1}
	a, b, c, d := newSub(), newSub(), newSub(), newSub()
	ta := tu.take(a)
	if ta == nil {
		t.Fatal("a found no free turn")
	}
	for _, s := range []*subscriber{b, c, d} {
		if tu.take(s) != nil {
			t.Fatal("a turn was granted while a holds the only one")
		}
	}
	ta.release() // granted to b
	select {
	case <-b.wake:
	default:
		t.Fatal("b was not woken when granted the turn")
	}
	b.granted.expire() // b's send goroutine did not come in time: c's turn
	tc := tu.take(c)
	if tc == nil {
		t.Fatal("c was not granted the turn b let expire")
	}
	if tu.take(b) != nil {
		t.Fatal("b got a turn while c holds the only one")
	}
	if len(tu.waiting) != 2 || tu.waiting[0] != b || tu.waiting[1] != d {
		t.Fatalf("line after b's grant expired: %d waiting, b first %v; want b, then d", len(tu.waiting), len(tu.waiting) > 0 && tu.waiting[0] == b)
	}
	tc.release() // to b
	if tb := tu.take(b); tb == nil {
		t.Fatal("b was not granted the turn c released")
	} else {
		tb.release()
	}
	tu.leave(d)
}
