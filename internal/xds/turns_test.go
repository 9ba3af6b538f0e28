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
	srv.turns = newTurnsOf(time.Minute, 1) // one list at a time
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
	srv.turns = newTurnsOf(200*time.Millisecond, 1)
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

// Turns are counted in bytes: small lists go many at a time, a large one
// alone, in the order they asked; a turn granted but expired before its
// subscriber came for it keeps that subscriber at the head of the line.
func TestTurnsCountBytes(t *testing.T) {
	newSub := func() *subscriber { return &subscriber{wake: make(chan struct{}, 1)} }
	tu := newTurnsOf(time.Hour, 10)
	a, b, c, d := newSub(), newSub(), newSub(), newSub()
	ta := tu.take(a, 6)
	if ta == nil {
		t.Fatal("a found no turn with the whole budget free")
	}
	if tu.take(b, 6) != nil {
		t.Fatal("b got 6 bytes with 4 free")
	}
	if tu.take(c, 3) != nil {
		t.Fatal("c went before b, which asked first")
	}
	ta.release()
	for _, s := range []*subscriber{b, c} {
		select {
		case <-s.wake:
		default:
			t.Fatal("a subscriber in line was not woken when the bytes it needs came free")
		}
	}
	tb, tc := tu.take(b, 6), tu.take(c, 3)
	if tb == nil || tc == nil {
		t.Fatal("b and c (9 of 10 bytes) were not both granted")
	}
	// Larger than the whole budget: alone, once nothing is in flight.
	if tu.take(d, 50) != nil {
		t.Fatal("d's 50 bytes went beside 9 in flight")
	}
	tb.release()
	tc.release()
	if td := tu.take(d, 50); td == nil {
		t.Fatal("d's list larger than the budget never goes")
	} else {
		td.release()
	}

	// b is granted a turn that expires before b comes for it: b goes
	// back to the head of the line, ahead of d, which asked after it.
	tu = newTurnsOf(time.Hour, 10)
	ta = tu.take(a, 10)
	for _, s := range []*subscriber{b, c, d} {
		if tu.take(s, 10) != nil {
			t.Fatal("a turn was granted while a holds the whole budget")
		}
	}
	ta.release()       // granted to b
	b.granted.expire() // b's send goroutine did not come in time: c's turn
	tc = tu.take(c, 10)
	if tc == nil {
		t.Fatal("c was not granted the turn b let expire")
	}
	if tu.take(b, 10) != nil {
		t.Fatal("b got a turn while c holds the whole budget")
	}
	if len(tu.waiting) != 2 || tu.waiting[0] != b || tu.waiting[1] != d {
		t.Fatalf("line after b's grant expired: %d waiting, b first %v; want b, then d", len(tu.waiting), len(tu.waiting) > 0 && tu.waiting[0] == b)
	}
	tc.release()
	tu.leave(b)
	tu.leave(d)
}
