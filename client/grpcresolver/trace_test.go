package grpcresolver_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/client/grpcresolver"
)

// traceServer is a real grpc-go server that keeps each call's metadata
// and, for a call with "x-hop: 1", calls next with the handler's own ctx,
// as a service in a chain does.
type traceServer struct {
	testgrpc.UnimplementedTestServiceServer
	mu   sync.Mutex
	seen []metadata.MD
	next testgrpc.TestServiceClient
}

func (s *traceServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.seen = append(s.seen, md)
	s.mu.Unlock()
	if len(md.Get("x-hop")) > 0 && s.next != nil {
		return s.next.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (s *traceServer) last() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[len(s.seen)-1]
}

func serveTrace(t *testing.T, s *traceServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, s)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

func traceClient(t *testing.T, addr string) testgrpc.TestServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpcresolver.TraceUnaryInterceptor()),
		grpc.WithChainStreamInterceptor(grpcresolver.TraceStreamInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// TestTraceInterceptors: a service's RPCs carry the trace context it was
// called with: an HTTP request's (client.WithTraceContext), or the gRPC
// call it serves (its handler's ctx), through real grpc-go connections;
// an invalid traceparent is not carried; an RPC naming its own keeps it.
func TestTraceInterceptors(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	back := &traceServer{}
	mid := &traceServer{next: traceClient(t, serveTrace(t, back))}
	c := traceClient(t, serveTrace(t, mid))

	ctx := client.WithTraceContext(context.Background(), http.Header{"Traceparent": {tp}, "Tracestate": {"a=1"}, "X-Request-Id": {"r1"}})
	if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if md := mid.last(); len(md.Get("traceparent")) != 1 || md.Get("traceparent")[0] != tp || md.Get("tracestate")[0] != "a=1" || md.Get("x-request-id")[0] != "r1" {
		t.Errorf("from an HTTP request's context: %v", md)
	}

	// Two hops: mid's handler calls back with its own ctx.
	hop := metadata.AppendToOutgoingContext(ctx, "x-hop", "1")
	if _, err := c.UnaryCall(hop, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if md := back.last(); len(md.Get("traceparent")) != 1 || md.Get("traceparent")[0] != tp || md.Get("x-request-id")[0] != "r1" {
		t.Errorf("through the served call's context: %v", md)
	}

	bad := client.WithTraceContext(context.Background(), http.Header{"Traceparent": {"00-zz"}, "X-Request-Id": {"r2"}})
	if _, err := c.UnaryCall(bad, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if md := mid.last(); len(md.Get("traceparent")) != 0 || md.Get("x-request-id")[0] != "r2" {
		t.Errorf("an invalid traceparent: %v", md)
	}

	own := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-11111111111111111111111111111111-2222222222222222-01")
	if _, err := c.UnaryCall(own, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if md := mid.last(); len(md.Get("traceparent")) != 1 || md.Get("traceparent")[0] == tp || len(md.Get("tracestate")) != 0 {
		t.Errorf("an RPC's own context: %v", md)
	}
}
