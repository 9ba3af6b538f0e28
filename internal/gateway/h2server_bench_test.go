package gateway_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// BenchmarkH2Server is BenchmarkGRPCUnary's call through two gateways of
// one binary, alternating: one with the frame-level HTTP/2 server
// (h2server.go, the default), one with net/http's
// (SEXTANT_H2_SERVER=nethttp).
//
//	go test -run '^$' -bench H2Server -benchtime 2s -count 6 ./internal/gateway > h2server.txt
//	benchstat -col /server h2server.txt
func BenchmarkH2Server(b *testing.B) {
	s := startGRPCServerTB(b, "bench")
	cp := startControlPlaneB(b)
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "grpc"))),
		h2cCluster("grpc"), assignment("grpc", ep{u: s.up}))
	req := &testgrpc.SimpleRequest{ResponseSize: 1024}
	client := func(g *gw) (testgrpc.TestServiceClient, func()) {
		cc, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(g.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		c := testgrpc.NewTestServiceClient(cc)
		awaitUnary(b, c, req)
		return c, func() { cc.Close() }
	}
	frame, closeFrame := client(startGatewayB(b, cp.addr))
	defer closeFrame()
	// The listener reads SEXTANT_H2_SERVER when it starts serving: by the
	// first answer.
	os.Setenv("SEXTANT_H2_SERVER", "nethttp")
	std, closeStd := client(startGatewayB(b, cp.addr))
	os.Unsetenv("SEXTANT_H2_SERVER")
	defer closeStd()
	for _, tc := range []struct {
		name string
		c    testgrpc.TestServiceClient
	}{{"server=frame", frame}, {"server=nethttp", std}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := tc.c.UnaryCall(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			// The process's CPU per call (caller, gateway and server
			// together): on a shared machine, steadier than the time.
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}
