package grpcresolver

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	grpcbalancer "google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is a real gRPC server (the standard health service) on loopback.
type backend struct {
	addr string
	port int
}

func startBackend(t *testing.T) backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return backend{addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port}
}

// callers counts which backend answered each of n health checks.
func callers(t *testing.T, conn *grpc.ClientConn, n int) map[string]int {
	t.Helper()
	hc := healthpb.NewHealthClient(conn)
	got := map[string]int{}
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var p peer.Peer
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got[p.Addr.String()]++
	}
	return got
}

// setup registers three backends of "orders": one v1 and two v2.
func setup(t *testing.T) (*client.Client, string, []backend) {
	t.Helper()
	srv := apitest.Start(t)
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.HTTPClient().CloseIdleConnections)
	bs := []backend{startBackend(t), startBackend(t), startBackend(t)}
	for i, b := range bs {
		version := "v2"
		if i == 0 {
			version = "v1"
		}
		_, err := c.Register(context.Background(), client.Instance{ID: "b" + strconv.Itoa(i), Service: "orders",
			Host: "127.0.0.1", Port: b.port, Protocol: "grpc", Metadata: map[string]string{"version": version}})
		if err != nil {
			t.Fatal(err)
		}
	}
	return c, srv.URL, bs
}

func TestResolverWithSharedView(t *testing.T) {
	c, _, bs := setup(t)
	v, err := c.NewView(client.ViewOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	conn, err := grpc.NewClient("sextant:///orders?selector=version%3Dv2",
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(NewBuilder(v)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	got := callers(t, conn, 60)
	if got[bs[0].addr] != 0 || got[bs[1].addr] == 0 || got[bs[2].addr] == 0 {
		t.Fatalf("calls %v: want both v2 backends (%s, %s) and never v1 (%s)", got, bs[1].addr, bs[2].addr, bs[0].addr)
	}

	// Deregister one v2 backend: the resolver drops it and calls move off.
	if _, err := c.DeregisterOne(context.Background(), "b1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = callers(t, conn, 20)
		if got[bs[1].addr] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still reach the deregistered backend: %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got[bs[2].addr] != 20 {
		t.Fatalf("calls %v, want all on %s", got, bs[2].addr)
	}
}

// TestRegisteredResolver: the resolver registered by importing the package
// reaches the server named in the target's authority, and closes its own
// View with the connection (goleak checks).
func TestRegisteredResolver(t *testing.T) {
	_, url, bs := setup(t)
	host := url[len("http://"):]
	conn, err := grpc.NewClient("sextant://"+host+"/default/orders?selector=version%3Dv1",
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	got := callers(t, conn, 10)
	if got[bs[0].addr] != 10 {
		t.Fatalf("calls %v, want all on the v1 backend %s", got, bs[0].addr)
	}
	conn.Close()
}

func TestResolverRejectsBadTarget(t *testing.T) {
	for _, target := range []string{"sextant:///orders?selector=version%20in%20(", "sextant:///"} {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			continue // rejected at once
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		conn.Close()
		if err == nil {
			t.Errorf("%s: a call succeeded", target)
		}
	}
}

func TestOutcome(t *testing.T) {
	for code, want := range map[codes.Code]balancer.Outcome{
		codes.OK: balancer.Success, codes.NotFound: balancer.Success, codes.ResourceExhausted: balancer.Rejected,
		codes.DeadlineExceeded: balancer.Timeout, codes.Canceled: balancer.Canceled, codes.Unavailable: balancer.Failed,
	} {
		var err error
		if code != codes.OK {
			err = status.Error(code, "x")
		}
		if got := outcome(grpcbalancer.DoneInfo{Err: err}); got != want {
			t.Errorf("%v: outcome %v, want %v", code, got, want)
		}
	}
}
