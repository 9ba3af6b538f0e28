package gateway_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// BenchmarkProxy is one call through the gateway over loopback (client ->
// gateway -> upstream, keep-alive, 1 KB answers, call recording on),
// measured from a fasthttp client; parallel with GOMAXPROCS clients. Socket
// syscalls dominate it (docs/gateway.md); allocs/op is the gateway's and the
// client's.
func BenchmarkProxy(b *testing.B) { benchProxyWith(b, gateway.Options{}) }

// BenchmarkGRPCUnary is one grpc-go unary call (empty request, 1 KiB
// answer) directly to the server and through the gateway (h2c both ways),
// from parallel callers over one client connection each way: the ratio
// of the two is the gateway's cost per gRPC call.
func BenchmarkGRPCUnary(b *testing.B) {
	s := startGRPCServerTB(b, "bench")
	cp := startControlPlaneB(b)
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "grpc"))),
		h2cCluster("grpc"), assignment("grpc", ep{u: s.up}))
	g := startGatewayB(b, cp.addr)
	for _, tc := range []struct{ name, addr string }{
		{"direct", s.up.addr},
		{"gateway", strings.TrimPrefix(g.url, "http://")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cc, err := grpc.NewClient("passthrough:///"+tc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			c := testgrpc.NewTestServiceClient(cc)
			req := &testgrpc.SimpleRequest{ResponseSize: 1024}
			awaitUnary(b, c, req)
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.UnaryCall(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// awaitUnary calls c until a call is answered (the gateway has its routes),
// for at most 10 s.
func awaitUnary(b *testing.B, c testgrpc.TestServiceClient, req *testgrpc.SimpleRequest) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.UnaryCall(ctx, req)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("no answer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkH2ToH1 is one HTTP/2 request (h2c, Go's HTTP/2 client, parallel
// streams on one connection) through the gateway to an HTTP/1.1 endpoint
// answering 1 KiB: the dataplane bench's h2c figure in one process.
func BenchmarkH2ToH1(b *testing.B) {
	body := make([]byte, 1024)
	u := startFastUpstream(b, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/octet-stream")
		ctx.SetBody(body)
	})
	cp := startControlPlaneB(b)
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "u"))),
		edsCluster("u"), assignment("u", ep{u: u}))
	g := startGatewayB(b, cp.addr)
	client := h2cClient(0)
	get := func() error {
		res, err := client.Get(g.url + "/")
		if err != nil {
			return err
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || n != int64(len(body)) {
			return fmt.Errorf("status %d, %d bytes", res.StatusCode, n)
		}
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for get() != nil {
		if time.Now().After(deadline) {
			b.Fatal("gateway got no config")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := get(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
