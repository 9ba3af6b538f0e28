package gateway_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previouspriorities "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/locality"
)

// grpcServer is a real grpc-go server of grpc's interop TestService on
// loopback. Its unary calls act on the request's "x-mode" metadata: ok
// (the default: answer with the server's name, a header and a trailer),
// fail (FAILED_PRECONDITION with a trailer), unavailable, or sleep (until
// the call is cancelled); a server named "bad" answers every call
// UNAVAILABLE. Its bidirectional calls echo each message.
type grpcServer struct {
	testgrpc.UnimplementedTestServiceServer
	name      string
	up        *upstream
	calls     atomic.Int64
	cancelled chan struct{} // a sleeping call saw its context end
	srv       *grpc.Server
}

func startGRPCServer(t *testing.T, name string) *grpcServer { return startGRPCServerTB(t, name) }

func startGRPCServerTB(t testing.TB, name string) *grpcServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &grpcServer{name: name, cancelled: make(chan struct{}, 16), srv: grpc.NewServer()}
	testgrpc.RegisterTestServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(s.srv.Stop)
	tcp := ln.Addr().(*net.TCPAddr)
	s.up = &upstream{name: name, addr: ln.Addr().String(), host: tcp.IP.String(), port: uint32(tcp.Port)}
	return s
}

func (s *grpcServer) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	mode := ""
	if v := md.Get("x-mode"); len(v) > 0 {
		mode = v[0]
	}
	if s.name == "bad" {
		mode = "unavailable"
	}
	switch mode {
	case "fail":
		grpc.SetTrailer(ctx, metadata.Pairs("x-why", "because "+s.name))
		return nil, grpcstatus.Error(codes.FailedPrecondition, "boom from "+s.name)
	case "unavailable":
		return nil, grpcstatus.Error(codes.Unavailable, s.name+" is unavailable")
	case "sleep":
		select {
		case <-ctx.Done():
			s.cancelled <- struct{}{}
			return nil, ctx.Err()
		case <-time.After(20 * time.Second):
		}
	}
	grpc.SetHeader(ctx, metadata.Pairs("x-hdr", s.name))
	grpc.SetTrailer(ctx, metadata.Pairs("x-trl", "end of "+s.name))
	if n := req.GetResponseSize(); n > 0 {
		return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, n)}}, nil
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: append([]byte(s.name+":"), req.GetPayload().GetBody()...)}}, nil
}

func (s *grpcServer) FullDuplexCall(stream grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	s.calls.Add(1)
	n := 0
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			stream.SetTrailer(metadata.Pairs("x-echoed", strings.Repeat("m", n)))
			return nil
		}
		if err != nil {
			return err
		}
		n++
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: append([]byte(s.name+":"), in.GetPayload().GetBody()...)}}); err != nil {
			return err
		}
	}
}

// h2cCluster is an EDS cluster whose endpoints speak HTTP/2 (gRPC).
func h2cCluster(name string) *cluster.Cluster {
	opts, _ := anypb.New(&upstreamhttp.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{}}}})
	return edsCluster(name, func(c *cluster.Cluster) {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
	})
}

// grpcClient is a grpc-go client of the gateway, returned once a call
// through it succeeds (the gateway has its config).
func grpcClient(t *testing.T, g *gw) testgrpc.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(g.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	c := testgrpc.NewTestServiceClient(cc)
	waitFor(t, "a gRPC call through the gateway", func() bool {
		_, err := c.UnaryCall(callCtx(t, ""), &testgrpc.SimpleRequest{})
		return err == nil
	})
	return c
}

func callCtx(t *testing.T, mode string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if mode != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-mode", mode)
	}
	return ctx
}

// grpc-go unary and bidirectional calls through the gateway, with the
// server's headers, trailers and error status kept, and grpc-status in
// the call records.
func TestGRPCThroughGateway(t *testing.T) {
	s := startGRPCServer(t, "g1")
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "grpc"))),
		h2cCluster("grpc"), assignment("grpc", ep{u: s.up}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	c := grpcClient(t, g)

	var hdr, trl metadata.MD
	res, err := c.UnaryCall(callCtx(t, ""), &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("hi")}},
		grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil || string(res.GetPayload().GetBody()) != "g1:hi" {
		t.Fatalf("unary: %v %v", res, err)
	}
	if got := hdr.Get("x-hdr"); len(got) != 1 || got[0] != "g1" || len(hdr.Get("via")) == 0 {
		t.Errorf("unary headers: %v", hdr)
	}
	if got := trl.Get("x-trl"); len(got) != 1 || got[0] != "end of g1" {
		t.Errorf("unary trailers: %v", trl)
	}

	trl = nil
	_, err = c.UnaryCall(callCtx(t, "fail"), &testgrpc.SimpleRequest{}, grpc.Trailer(&trl))
	if st := grpcstatus.Convert(err); st.Code() != codes.FailedPrecondition || st.Message() != "boom from g1" {
		t.Fatalf("server error: %v", err)
	}
	if got := trl.Get("x-why"); len(got) != 1 || got[0] != "because g1" {
		t.Errorf("error trailers: %v", trl)
	}

	// Bidirectional: each message is answered before the next is sent, so
	// neither direction may be held back by the gateway.
	stream, err := c.FullDuplexCall(callCtx(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []string{"a", "bb", "ccc"} {
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(m)}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		out, err := stream.Recv()
		if err != nil || string(out.GetPayload().GetBody()) != "g1:"+m {
			t.Fatalf("recv %d: %v %v", i, out, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	if got := stream.Trailer().Get("x-echoed"); len(got) != 1 || got[0] != "mmm" {
		t.Errorf("stream trailers: %v", stream.Trailer())
	}

	var ok, failed, bidi bool
	var grpcStatuses []int
	for _, rec := range g.calls(t, "grpc") {
		if rec.GRPCStatus == nil {
			continue
		}
		grpcStatuses = append(grpcStatuses, *rec.GRPCStatus)
		switch {
		case *rec.GRPCStatus == 0 && rec.BytesOut > 0 && rec.Status == 200:
			ok = true
			if rec.BytesIn >= 20 {
				bidi = true
			}
		case *rec.GRPCStatus == int(codes.FailedPrecondition) && rec.Status == 200:
			failed = true
		}
	}
	if !ok || !failed || !bidi {
		t.Fatalf("call records' grpc-status: %v", grpcStatuses)
	}
}

// A call an endpoint answers UNAVAILABLE (trailers-only) is retried on
// another endpoint when the route retries on "unavailable".
func TestGRPCRetryOnUnavailable(t *testing.T) {
	bad, good := startGRPCServer(t, "bad"), startGRPCServer(t, "good")
	rt := prefixRoute("/", "grpc")
	rt.GetRoute().RetryPolicy = &route.RetryPolicy{RetryOn: "unavailable,cancelled", NumRetries: wrapperspb.UInt32(2),
		RetryHostPredicate:            []*route.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts"}},
		HostSelectionRetryMaxAttempts: 5}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, rt)),
		h2cCluster("grpc"), assignment("grpc", ep{u: bad.up}, ep{u: good.up}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	c := grpcClient(t, g)
	for i := range 10 {
		res, err := c.UnaryCall(callCtx(t, ""), &testgrpc.SimpleRequest{})
		if err != nil || !strings.HasPrefix(string(res.GetPayload().GetBody()), "good:") {
			t.Fatalf("call %d: %v %v", i, res, err)
		}
	}
	if bad.calls.Load() == 0 {
		t.Fatal("the unavailable endpoint was never tried: nothing was retried")
	}
	retried := 0
	for _, rec := range g.calls(t, "grpc") {
		if rec.Retries > 0 && rec.GRPCStatus != nil && *rec.GRPCStatus == 0 {
			retried++
		}
	}
	if int64(retried) != bad.calls.Load() {
		t.Fatalf("%d records of retried calls, the bad endpoint took %d", retried, bad.calls.Load())
	}
}

// The grpc-timeout of a call bounds the gateway's upstream deadline: the
// call ends DEADLINE_EXCEEDED (a trailers-only answer of the gateway's own)
// and the upstream's call is cancelled, well before the route's timeout.
func TestGRPCTimeoutHonoured(t *testing.T) {
	s := startGRPCServer(t, "slow")
	rt := prefixRoute("/", "grpc")
	rt.GetRoute().Timeout = durationpb.New(30 * time.Second)
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, rt)), h2cCluster("grpc"), assignment("grpc", ep{u: s.up}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	c := grpcClient(t, g)

	// A raw HTTP/2 call with no deadline of its own: only the gateway can
	// end it, as the grpc-timeout says.
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 15 * time.Second}
	msg := make([]byte, 5) // an empty SimpleRequest, length-prefixed
	binary.BigEndian.PutUint32(msg[1:], 0)
	req, _ := http.NewRequest("POST", g.url+"/grpc.testing.TestService/UnaryCall", bytes.NewReader(msg))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Timeout", "300m")
	req.Header.Set("X-Mode", "sleep")
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(t0)
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "4" || len(b) != 0 {
		t.Fatalf("after grpc-timeout: %d %q %v (trailers %v)", resp.StatusCode, b, resp.Header, resp.Trailer)
	}
	if took > 10*time.Second {
		t.Fatalf("the 300ms grpc-timeout ended the call after %v", took)
	}
	select {
	case <-s.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's call was not cancelled")
	}

	// grpc-go sends its deadline as grpc-timeout.
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-mode", "sleep"), 300*time.Millisecond)
	defer cancel()
	if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); grpcstatus.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("grpc-go call past its deadline: %v", err)
	}
	// A call is recorded once its stream ended, which may be just after
	// the client saw its trailers. Its reason is upstream_timeout when the
	// gateway's timer ended it, none when the upstream, which got the
	// grpc-timeout too, answered DEADLINE_EXCEEDED first (a loaded machine
	// makes either come first).
	deadline := time.Now().Add(15 * time.Second)
	for {
		var timedOut int
		recs := g.calls(t, "grpc")
		for _, rec := range recs {
			if rec.GRPCStatus != nil && *rec.GRPCStatus == int(codes.DeadlineExceeded) && (rec.Reason == "upstream_timeout" || rec.Reason == "") {
				timedOut++
			}
		}
		if timedOut > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call record of a call ended by its grpc-timeout: %+v", recs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A gRPC call (the gateway's HTTP/2 path) honours the previous_priorities
// retry priority too: the gateway in zone a, zone a's endpoint answering
// UNAVAILABLE, one retry with update_frequency 1 lands in zone b; without
// the retry priority the retry stays in zone a and the call fails.
func TestGRPCRetryRemoteLocalities(t *testing.T) {
	bad, good := startGRPCServer(t, "bad"), startGRPCServer(t, "good")
	freq1, err := anypb.New(&previouspriorities.PreviousPrioritiesConfig{UpdateFrequency: 1})
	if err != nil {
		t.Fatal(err)
	}
	remote := prefixRoute("/", "grpc")
	remote.Match.Headers = []*route.HeaderMatcher{{Name: "x-remote", HeaderMatchSpecifier: &route.HeaderMatcher_PresentMatch{PresentMatch: true}}}
	remote.GetRoute().RetryPolicy = &route.RetryPolicy{RetryOn: "unavailable", NumRetries: wrapperspb.UInt32(1),
		RetryPriority: &route.RetryPolicy_RetryPriority{Name: "envoy.retry_priorities.previous_priorities",
			ConfigType: &route.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: freq1}}}
	local := prefixRoute("/", "grpc")
	local.GetRoute().RetryPolicy = &route.RetryPolicy{RetryOn: "unavailable", NumRetries: wrapperspb.UInt32(1)}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, remote, local)), h2cCluster("grpc"),
		zoned("grpc", nil, []string{"b", "a"}, []ep{{u: good.up}}, []ep{{u: bad.up}}))
	g := startGatewayWith(t, cp.addr, gateway.Options{Locality: locality.Locality{Region: "r1", Zone: "a"}})
	g.waitEndpoints(t, 1)
	cc, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(g.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	c := testgrpc.NewTestServiceClient(cc)
	remoteCall := func() (*testgrpc.SimpleResponse, error) {
		return c.UnaryCall(metadata.AppendToOutgoingContext(callCtx(t, ""), "x-remote", "1"), &testgrpc.SimpleRequest{})
	}
	waitFor(t, "a gRPC call through the gateway", func() bool { _, err := remoteCall(); return err == nil })
	const n = 10
	bad0, good0 := bad.calls.Load(), good.calls.Load()
	for i := range n {
		res, err := remoteCall()
		if err != nil || !strings.HasPrefix(string(res.GetPayload().GetBody()), "good:") {
			t.Fatalf("call %d with the retry priority: %v %v", i, res, err)
		}
	}
	if b, g := bad.calls.Load()-bad0, good.calls.Load()-good0; b != n || g != n {
		t.Fatalf("with the retry priority: zone a took %d attempts, zone b %d; want %d each", b, g, n)
	}
	bad0, good0 = bad.calls.Load(), good.calls.Load()
	for i := range n {
		if _, err := c.UnaryCall(callCtx(t, ""), &testgrpc.SimpleRequest{}); grpcstatus.Code(err) != codes.Unavailable {
			t.Fatalf("call %d without the retry priority: %v, want UNAVAILABLE from zone a", i, err)
		}
	}
	if b, g := bad.calls.Load()-bad0, good.calls.Load()-good0; b != 2*n || g != 0 {
		t.Fatalf("without the retry priority: zone a took %d attempts, zone b %d; want %d and 0", b, g, 2*n)
	}
}
