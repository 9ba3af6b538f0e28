package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// grpcPrefix is the gRPC test service's path prefix: every proxy routes it
// to the gRPC upstream.
const grpcPrefix = "/grpc.testing.TestService/"

// ServeGRPCUpstream is the bench's gRPC upstream: grpc-go serving the
// interop TestService's UnaryCall and FullDuplexCall, each answer a payload
// of the size asked for. It serves ln until ctx ends.
func ServeGRPCUpstream(ctx context.Context, ln net.Listener) error {
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, &grpcUpstream{})
	go func() { <-ctx.Done(); srv.Stop() }()
	return srv.Serve(ln)
}

type grpcUpstream struct {
	testgrpc.UnimplementedTestServiceServer
}

// payloads are the answers' bodies by size, shared (read only).
var payloads sync.Map

func payload(n int32) *testgrpc.Payload {
	if p, ok := payloads.Load(n); ok {
		return p.(*testgrpc.Payload)
	}
	p, _ := payloads.LoadOrStore(n, &testgrpc.Payload{Body: bytes.Repeat([]byte("x"), int(min(n, 1<<20)))})
	return p.(*testgrpc.Payload)
}

func (*grpcUpstream) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: payload(req.GetResponseSize())}, nil
}

func (*grpcUpstream) FullDuplexCall(s testgrpc.TestService_FullDuplexCallServer) error {
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, p := range req.GetResponseParameters() {
			if err := s.Send(&testgrpc.StreamingOutputCallResponse{Payload: payload(p.GetSize())}); err != nil {
				return err
			}
		}
	}
}

// GRPCLoadConfig is one run of the gRPC loader.
type GRPCLoadConfig struct {
	Target string // host:port, h2c
	// Mode is "unary" (UnaryCall) or "stream" (FullDuplexCall, each
	// stream sending a request and waiting for its answer in turn).
	Mode        string
	Concurrency int // calls or streams in flight (64)
	Duration    time.Duration
	AnswerBytes int32 // 1024
}

// GRPCLoadResult is the loader's one JSON line.
type GRPCLoadResult struct {
	Calls   int64   `json:"calls"` // unary calls, or stream messages answered
	Errors  int64   `json:"errors"`
	CallsPS float64 `json:"calls_per_s"`
	P50Us   float64 `json:"p50_us"`
	P99Us   float64 `json:"p99_us"`
}

// RunGRPCLoad drives cfg.Target over one connection (as a grpc-go client
// does) with Concurrency callers for Duration, closed loop, after a first
// call has been answered (the proxy has its route).
func RunGRPCLoad(ctx context.Context, cfg GRPCLoadConfig) (GRPCLoadResult, error) {
	cfg.Concurrency = max(cfg.Concurrency, 1)
	if cfg.AnswerBytes <= 0 {
		cfg.AnswerBytes = 1024
	}
	cc, err := grpc.NewClient("passthrough:///"+cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return GRPCLoadResult{}, fmt.Errorf("bench: grpc client: %w", err)
	}
	defer cc.Close()
	c := testgrpc.NewTestServiceClient(cc)
	req := &testgrpc.SimpleRequest{ResponseSize: cfg.AnswerBytes}
	for deadline := time.Now().Add(10 * time.Second); ; {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.UnaryCall(cctx, req)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return GRPCLoadResult{}, fmt.Errorf("bench: no gRPC answer from %s: %w", cfg.Target, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	lctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	lats := make([][]time.Duration, cfg.Concurrency)
	errs := make([]int64, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cfg.Mode == "stream" {
				lats[i], errs[i] = streamCaller(lctx, c, cfg.AnswerBytes)
				return
			}
			for lctx.Err() == nil {
				t := time.Now()
				// The call itself is not bound by lctx: one cut at the end
				// of the run is not an error of the proxy.
				_, err := c.UnaryCall(ctx, req)
				if err != nil {
					errs[i]++
					continue
				}
				lats[i] = append(lats[i], time.Since(t))
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	var all []time.Duration
	r := GRPCLoadResult{}
	for i := range lats {
		all = append(all, lats[i]...)
		r.Errors += errs[i]
	}
	slices.Sort(all)
	r.Calls = int64(len(all))
	r.CallsPS = round3(float64(r.Calls) / secs)
	if len(all) > 0 {
		r.P50Us = float64(all[len(all)/2].Microseconds())
		r.P99Us = float64(all[min(len(all)*99/100, len(all)-1)].Microseconds())
	}
	return r, nil
}

// streamCaller runs one bidirectional stream until ctx ends: a request
// asking for one answer, the answer, again.
func streamCaller(ctx context.Context, c testgrpc.TestServiceClient, size int32) (lats []time.Duration, errs int64) {
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := c.FullDuplexCall(sctx)
	if err != nil {
		return nil, 1
	}
	req := &testgrpc.StreamingOutputCallRequest{ResponseParameters: []*testgrpc.ResponseParameters{{Size: size}}}
	for ctx.Err() == nil {
		t := time.Now()
		if err := s.Send(req); err != nil {
			return lats, errs + 1
		}
		if _, err := s.Recv(); err != nil {
			return lats, errs + 1
		}
		lats = append(lats, time.Since(t))
	}
	if err := s.CloseSend(); err != nil {
		return lats, errs + 1
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		errs++
	}
	return lats, errs
}

// addGRPCRoute adds to res the cluster "grpc" (h2c to endpoints, as Istio
// publishes a GRPC port: http2_protocol_options) and, first in the route
// table, the gRPC test service's prefix to it.
func addGRPCRoute(res map[resource.Type][]types.Resource, endpoints []string) {
	opts, _ := anypb.New(&upstreamhttp.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{}}}})
	c := benchCluster("round_robin")
	c.Name = "grpc"
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
	res[resource.ClusterType] = append(res[resource.ClusterType], c)
	e := benchEndpoints(endpoints)
	e.ClusterName = "grpc"
	res[resource.EndpointType] = append(res[resource.EndpointType], e)
	rc := res[resource.RouteType][0].(*route.RouteConfiguration)
	vh := rc.VirtualHosts[0]
	vh.Routes = append([]*route.Route{{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: grpcPrefix}},
		Action: &route.Route_Route{Route: &route.RouteAction{Timeout: durationpb.New(0), // streams last the run
			ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "grpc"}}}}}, vh.Routes...)
}
