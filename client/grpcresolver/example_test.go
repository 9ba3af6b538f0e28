package grpcresolver_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/client/grpcresolver"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// A gRPC client dials a service by name; the resolver follows its
// instances (here: those with version=v2) and the sextant_adaptive
// balancer spreads the RPCs.
func Example() {
	// A real Sextant server; in your code, "sextant server".
	dir, err := os.MkdirTemp("", "sextant-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	stack, err := apitest.NewStack(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer stack.Close()

	// A gRPC server of "orders", registered with version v2.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	defer srv.Stop()
	c, err := client.New(stack.URL())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Register(context.Background(), client.Instance{Service: "orders", Host: "127.0.0.1",
		Port: ln.Addr().(*net.TCPAddr).Port, Protocol: "grpc", Metadata: map[string]string{"version": "v2"}}); err != nil {
		log.Fatal(err)
	}

	// With the package imported, "sextant://SERVER/service" needs no
	// option; here the server's address is in the target.
	target := "sextant://" + stack.URL()[len("http://"):] + "/orders?selector=version%3Dv2"
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.GetStatus(), grpcresolver.Scheme, grpcresolver.BalancerName)
	// Output:
	// SERVING sextant sextant_adaptive
}
