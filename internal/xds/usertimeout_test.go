package xds

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sextant-mesh/sextant/internal/connlimit"
)

// TestStallTimeoutThroughWrappedListener: a listener that wraps its
// connections (the server's xDS port caps them per source) still gives
// them the stall timeout as TCP_USER_TIMEOUT, which gRPC sets only on a
// *net.TCPConn: without it a subscriber that stopped reading would keep
// its connection for the kernel's retransmission limit.
func TestStallTimeoutThroughWrappedListener(t *testing.T) {
	const stall = 7 * time.Second
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &acceptLog{Listener: connlimit.New(inner, connlimit.Options{})}
	srv := NewServer(NewCache(), ServerOptions{StallTimeout: stall})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, lis); close(done) }()
	conn, err := grpc.NewClient(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	t.Cleanup(func() { scancel(); conn.Close(); cancel(); <-done })
	stream, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "wrapped"}, TypeUrl: TypeRoute.URL(), ResourceNames: []string{"none"}}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, srv, func(SubscriberStatus) bool { return true })
	lis.mu.Lock()
	conns := append([]net.Conn(nil), lis.conns...)
	lis.mu.Unlock()
	if len(conns) == 0 {
		t.Fatal("no connection accepted")
	}
	for _, c := range conns {
		if _, plain := c.(*net.TCPConn); plain {
			t.Fatal("the listener did not wrap its connection: the test tests nothing")
		}
		if got := userTimeout(t, c); got != stall {
			t.Fatalf("TCP_USER_TIMEOUT %v, want %v", got, stall)
		}
	}
}
