package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sextant-mesh/sextant/client"
)

// greeter is a grpc-go server of grpc's interop TestService: a unary call
// answers with its name and a trailer, or, with "x-fail" metadata,
// FAILED_PRECONDITION and a trailer; an unavailable one answers every
// call UNAVAILABLE; a bidirectional call echoes each message.
type greeter struct {
	testgrpc.UnimplementedTestServiceServer
	name        string
	unavailable bool
	calls       atomic.Int64
}

func startGreeter(t *testing.T, name string, unavailable bool) (*greeter, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &greeter{name: name, unavailable: unavailable}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, g)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return g, ln.Addr().(*net.TCPAddr).Port
}

func (g *greeter) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	g.calls.Add(1)
	if g.unavailable {
		return nil, status.Error(codes.Unavailable, g.name+" is unavailable")
	}
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-fail")) > 0 {
		grpc.SetTrailer(ctx, metadata.Pairs("x-why", "asked to fail"))
		return nil, status.Error(codes.FailedPrecondition, "failing as asked")
	}
	grpc.SetTrailer(ctx, metadata.Pairs("x-served-by", g.name))
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte(g.name)}}, nil
}

func (g *greeter) FullDuplexCall(stream grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: in.GetPayload()}); err != nil {
			return err
		}
	}
}

const greeterConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: greeter}
spec:
  host: greeter
  trafficPolicy:
    connectionPool:
      http: {h2UpgradePolicy: UPGRADE}
`

// TestMeshGRPC: grpc-go calls through the gateway to grpc-go servers
// registered in the registry, the server's control plane publishing their
// cluster as HTTP/2 (a DestinationRule's h2UpgradePolicy) and Sextant's
// default retry policy: unary and bidirectional calls, a server's error
// status and trailers kept, an UNAVAILABLE endpoint's calls retried on the
// other, grpc-status in the call log.
func TestMeshGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and gRPC servers")
	}
	ctx := context.Background()
	api, proxy, admin := startMesh(t)
	good, goodPort := startGreeter(t, "good", false)
	bad, badPort := startGreeter(t, "bad", true)
	for _, in := range []client.Instance{
		{ID: "good", Service: "greeter", Host: "127.0.0.1", Port: goodPort, Protocol: "grpc"},
		{ID: "bad", Service: "greeter", Host: "127.0.0.1", Port: badPort, Protocol: "grpc"},
	} {
		if _, err := api.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.ApplyConfig(ctx, []byte(greeterConfig), false); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///"+proxy, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("greeter"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testgrpc.NewTestServiceClient(cc)
	call := func(md ...string) (*testgrpc.SimpleResponse, metadata.MD, error) {
		cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, md...), 5*time.Second)
		defer cancel()
		var trl metadata.MD
		res, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{}, grpc.Trailer(&trl))
		return res, trl, err
	}
	waitTrue(t, 15*time.Second, func() bool { _, _, err := call(); return err == nil })
	for i := range 10 { // every call answered by good: bad's are retried there
		res, trl, err := call()
		if err != nil || string(res.GetPayload().GetBody()) != "good" || strings.Join(trl.Get("x-served-by"), "") != "good" {
			t.Fatalf("call %d: %v %v %v", i, res, trl, err)
		}
	}
	if bad.calls.Load() == 0 || good.calls.Load() < 10 {
		t.Fatalf("calls: bad %d, good %d: the unavailable endpoint was never tried", bad.calls.Load(), good.calls.Load())
	}
	_, trl, err := call("x-fail", "1")
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || st.Message() != "failing as asked" ||
		strings.Join(trl.Get("x-why"), "") != "asked to fail" {
		t.Fatalf("an error status through the gateway: %v, trailers %v", err, trl)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := c.FullDuplexCall(sctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"one", "two"} {
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte(m)}}); err != nil {
			t.Fatal(err)
		}
		if out, err := stream.Recv(); err != nil || string(out.GetPayload().GetBody()) != m {
			t.Fatalf("bidi echo of %q: %v %v", m, out, err)
		}
	}
	stream.CloseSend()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of the bidi stream: %v", err)
	}

	var calls struct {
		Calls []struct {
			Retries    int  `json:"retries"`
			GRPCStatus *int `json:"grpc_status"`
		} `json:"calls"`
	}
	waitTrue(t, 5*time.Second, func() bool {
		resp, err := http.Get("http://" + admin + "/v1/calls?service=default/greeter&from=0")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		calls.Calls = nil
		if json.NewDecoder(resp.Body).Decode(&calls) != nil {
			return false
		}
		var retried, failed bool
		for _, c := range calls.Calls {
			if c.GRPCStatus != nil && *c.GRPCStatus == 0 && c.Retries > 0 {
				retried = true
			}
			if c.GRPCStatus != nil && *c.GRPCStatus == int(codes.FailedPrecondition) {
				failed = true
			}
		}
		return retried && failed
	})
}
