package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/sextant-mesh/sextant/client"
)

// TestFailingCheckTakesTheInstanceOutOfGRPCXDS: an instance whose HTTP
// health check starts failing turns critical within interval x threshold
// (the server's own probes), leaves EDS, and grpc-go's own xDS client
// stops sending it calls, while its healthy neighbour keeps serving.
func TestFailingCheckTakesTheInstanceOutOfGRPCXDS(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, its health checks, grpc-go over xDS")
	}
	httpAddr, xdsAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverFlags{data: t.TempDir(), http: httpAddr, xds: xdsAddr, logFormat: "text",
			logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second})
	}()
	defer func() { cancel(); <-done }()
	base := "http://" + httpAddr
	waitTrue(t, 60*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	api, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}

	// Two grpc-go servers, each with an HTTP health endpoint whose answer
	// the test sets.
	type member struct {
		g      *greeter
		port   int
		health *httptest.Server
		code   atomic.Int64
	}
	members := map[string]*member{}
	for _, name := range []string{"a", "b"} {
		m := &member{}
		m.code.Store(http.StatusOK)
		m.g, m.port = startGreeter(t, name, false)
		m.health = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(m.code.Load())) }))
		t.Cleanup(m.health.Close)
		members[name] = m
	}
	const interval, threshold = time.Second, 2
	for name, m := range members {
		if _, err := api.Register(ctx, client.Instance{ID: "greeter-" + name, Service: "greeter", Host: "127.0.0.1", Port: m.port,
			Checks: []client.Check{{Type: "http", Target: m.health.URL, Interval: client.Duration(interval),
				FailuresBeforeCritical: threshold, Status: "passing"}}}); err != nil {
			t.Fatal(err)
		}
	}

	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "health-xds-client", "metadata": {"NAMESPACE": "default"}}
	}`, xdsAddr)
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///greeter", grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := testgrpc.NewTestServiceClient(conn)
	call := func() {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		if _, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("call: %v", err)
		}
	}
	// Both serve (round robin once both are connected); bounded in count.
	for i := 0; i < 2000 && (members["a"].g.calls.Load() == 0 || members["b"].g.calls.Load() == 0); i++ {
		call()
	}
	if members["a"].g.calls.Load() == 0 || members["b"].g.calls.Load() == 0 {
		t.Fatalf("calls reached a %d, b %d times: want both", members["a"].g.calls.Load(), members["b"].g.calls.Load())
	}

	// b's endpoint starts failing: critical within interval x threshold
	// (plus a probe's jitter and the write; generous under load).
	failed := time.Now()
	members["b"].code.Store(http.StatusInternalServerError)
	var critical time.Duration
	waitTrue(t, 30*time.Second, func() bool {
		in, err := api.Get(ctx, "greeter-b")
		if err != nil || len(in.Checks) != 1 || in.Checks[0].Status != "critical" {
			return false
		}
		critical = time.Since(failed)
		return true
	})
	t.Logf("critical after %v (interval %v x %d)", critical, interval, threshold)
	if bound := interval*threshold + 5*time.Second; critical > bound {
		t.Errorf("critical after %v, want within %v", critical, bound)
	}

	// grpc-go leaves it: once EDS has reached the client, no call goes to
	// b. Waited for as a run of 50 calls that all reach a, then 50 more.
	deadline := time.Now().Add(30 * time.Second)
	for run := 0; run < 50; {
		if time.Now().After(deadline) {
			t.Fatalf("grpc-go still calls the critical instance %v after its check failed", time.Since(failed))
		}
		before := members["b"].g.calls.Load()
		call()
		if members["b"].g.calls.Load() == before {
			run++
		} else {
			run = 0
		}
	}
	before := members["b"].g.calls.Load()
	for range 50 {
		call()
	}
	if n := members["b"].g.calls.Load() - before; n != 0 {
		t.Fatalf("the critical instance got %d of 50 calls", n)
	}

	// It recovers: passing again, back in rotation.
	members["b"].code.Store(http.StatusOK)
	for i := 0; i < 5000 && members["b"].g.calls.Load() == before; i++ {
		call()
		if i%100 == 99 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if members["b"].g.calls.Load() == before {
		t.Fatal("the recovered instance got no call back")
	}
}
