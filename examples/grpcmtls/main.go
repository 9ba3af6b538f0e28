// Command grpcmtls is a proxyless gRPC server or client over xDS for
// docs/security.md's walkthrough: grpc-go's own xDS server and client,
// configured by the control plane (listeners, mutual TLS, RBAC) and by the
// bootstrap file $GRPC_XDS_BOOTSTRAP names ("sextant identity bootstrap"
// prints one). Nothing in it knows about Sextant.
//
//	GRPC_XDS_BOOTSTRAP=inventory.json go run ./examples/grpcmtls --serve 127.0.0.1:50051
//	GRPC_XDS_BOOTSTRAP=frontend.json go run ./examples/grpcmtls --call xds:///inventory.default
//
// The server answers the standard health service; the client calls its
// Check once and prints the answer (SERVING) or the error's code and
// message, exiting 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds" // also registers the xds:/// resolver
)

func main() {
	serve := flag.String("serve", "", "serve on this address (an IP the instance is registered with, and a port)")
	call := flag.String("call", "", "call Health.Check once at this target (xds:///SERVICE.NAMESPACE)")
	flag.Parse()
	var err error
	switch {
	case *serve != "":
		err = runServer(*serve)
	case *call != "":
		err = runClient(*call)
	default:
		err = fmt.Errorf("give --serve ADDR or --call TARGET")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcmtls:", err)
		os.Exit(1)
	}
}

func runServer(addr string) error {
	// The control plane's listener decides TLS; without one (or for a
	// plaintext chain) the fallback serves plaintext.
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	srv, err := xds.NewGRPCServer(grpc.Creds(creds), xds.ServingModeCallback(func(a net.Addr, args xds.ServingModeChangeArgs) {
		if args.Mode == connectivity.ServingModeServing {
			fmt.Printf("serving on %s\n", a)
		} else {
			fmt.Printf("not serving on %s: %v\n", a, args.Err)
		}
	}))
	if err != nil {
		return err
	}
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; srv.GracefulStop() }()
	return srv.Serve(lis)
}

func runClient(target string) error {
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		s := status.Convert(err)
		return fmt.Errorf("%s: %s", s.Code(), s.Message())
	}
	fmt.Println(resp.Status)
	return nil
}
