package push_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// backend is a real gRPC server on loopback that answers with its name.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	name  string
	addr  *net.TCPAddr
	calls atomic.Int64
	srv   *grpc.Server
}

func (b *backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.calls.Add(1)
	return &testgrpc.SimpleResponse{Hostname: b.name}, nil
}

func startBackend(t *testing.T, name string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, addr: lis.Addr().(*net.TCPAddr), srv: grpc.NewServer()}
	testgrpc.RegisterTestServiceServer(b.srv, b)
	go b.srv.Serve(lis)
	t.Cleanup(b.srv.Stop)
	return b
}

func (b *backend) instance(color string) *instance.Instance {
	return &instance.Instance{
		ID: b.name, Namespace: "default", Service: "orders", Host: "127.0.0.1", Port: b.addr.Port,
		Weight: 100, Healthy: true, Metadata: label.FromMap(map[string]string{"color": color, "zone": "z1"}),
	}
}

const ordersConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets:
  - {name: blue, labels: {color: blue}}
  - {name: stable, labels: {color: stable}}
  - {name: gray, labels: {color: gray}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - match: [{headers: {x-group: {exact: blue}}}]
    route: [{destination: {host: orders, subset: blue}}]
  - match: [{headers: {x-group: {exact: gray}}}]
    route: [{destination: {host: orders, subset: gray}}]
  - route: [{destination: {host: orders, subset: stable}}]
`

// controlPlane is the engine and the ADS server on loopback, fed from an
// in-memory registry (pushtest) until the catalog implements Source; the
// server's own test runs the same client against the full stack.
type controlPlane struct {
	reg    *pushtest.Registry
	cache  *xds.Cache
	engine *push.Engine
	ads    *xds.Server
	addr   string
}

func startControlPlane(t *testing.T, ctx context.Context, reg *pushtest.Registry, tweak func(*push.Engine)) *controlPlane {
	t.Helper()
	return startControlPlaneWith(t, ctx, reg, push.Options{}, tweak)
}

func startControlPlaneWith(t *testing.T, ctx context.Context, reg *pushtest.Registry, opts push.Options, tweak func(*push.Engine)) *controlPlane {
	t.Helper()
	cp := &controlPlane{reg: reg, cache: xds.NewCache()}
	cp.engine = push.New(reg, cp.cache, opts)
	if tweak != nil {
		tweak(cp.engine)
	}
	cp.ads = xds.NewServer(cp.cache, xds.ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { cp.engine.Run(ctx); done <- struct{}{} }()
	go func() { cp.ads.Serve(ctx, lis); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return cp
}

// dial makes grpc-go's own xDS client: a bootstrap naming the control
// plane, the xds resolver, xds:///orders.
func dial(t *testing.T, cp *controlPlane, node string) *grpc.ClientConn {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "metadata": {"NAMESPACE": "default"}}
	}`, cp.addr, node)
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///orders", grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func call(ctx context.Context, c testgrpc.TestServiceClient, group string) (string, error) {
	if group != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-group", group)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return "", err
	}
	return r.Hostname, nil
}

// callsGo calls n times and returns the backends that answered.
func callsGo(t *testing.T, c testgrpc.TestServiceClient, group string, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		h, err := call(context.Background(), c, group)
		if err != nil {
			t.Fatalf("call (x-group %q): %v", group, err)
		}
		got[h]++
	}
	return got
}

// stableOnly: the default route's answer, both stable instances and not blue.
func stableOnly(got map[string]int) bool {
	return got["blue-1"] == 0 && got["stable-1"] > 0 && got["stable-2"] > 0
}

// settle calls n at a time until the answering backends satisfy ok, for at
// most 10 s, and fails the test otherwise. While it switches routes,
// grpc-go can fail a call with "unknown cluster selected for RPC": its
// ClientConn installs the new routes before its balancer has the new
// cluster, a window inside the client that no order of the server's
// responses closes. Only that error is retried here; any other fails, and
// the strict checks that follow a settle fail on every error.
func settle(t *testing.T, c testgrpc.TestServiceClient, group string, n int, ok func(map[string]int) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last map[string]int
	for time.Now().Before(deadline) {
		last = map[string]int{}
		failed := false
		for range n {
			h, err := call(context.Background(), c, group)
			if err != nil {
				if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "unknown cluster selected for RPC") {
					failed = true
					break
				}
				t.Fatalf("call (x-group %q): %v", group, err)
			}
			last[h]++
		}
		if !failed && ok(last) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("calls (x-group %q) did not settle in 10s: last reached %v", group, last)
}

func TestGRPCXDSClient(t *testing.T) {
	// Registered first, so it runs after every other cleanup.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	ctx := context.Background()
	blue, s1, s2 := startBackend(t, "blue-1"), startBackend(t, "stable-1"), startBackend(t, "stable-2")
	reg := registryWith(t, ordersConfig)
	reg.Upsert(blue.instance("blue"), s1.instance("stable"), s2.instance("stable"))
	cp := startControlPlane(t, ctx, reg, nil)
	conn := dial(t, cp, "client-1")
	client := testgrpc.NewTestServiceClient(conn)

	// The default route goes to the stable subset, both instances (once
	// round_robin has both connected).
	settle(t, client, "", 20, stableOnly)
	settle(t, client, "blue", 5, func(got map[string]int) bool { return got["blue-1"] == 5 })
	if got := callsGo(t, client, "", 40); got["blue-1"] != 0 || got["stable-1"] == 0 || got["stable-2"] == 0 {
		t.Fatalf("default route reached %v, want stable-1 and stable-2 only", got)
	}
	// The header match goes to the blue subset.
	if got := callsGo(t, client, "blue", 10); got["blue-1"] != 10 {
		t.Fatalf("x-group: blue reached %v, want blue-1 only", got)
	}
	// The gray subset has no instance: its route is left out (no empty
	// cluster), so its requests fall through to the default route.
	if got := callsGo(t, client, "gray", 10); got["stable-1"]+got["stable-2"] != 10 {
		t.Fatalf("x-group: gray (empty subset) reached %v, want the stable default", got)
	}

	// Deregistering an instance moves the client off it within 100 ms. The
	// machine is shared, so one of three tries must make it, all within 2 s.
	var best time.Duration
	for try := range 3 {
		took := moveOff(t, client, cp.reg, s2)
		t.Logf("try %d: client off the deregistered instance after %v", try, took)
		if took > 2*time.Second {
			t.Fatalf("client still reached the deregistered instance after %v", took)
		}
		if try == 0 || took < best {
			best = took
		}
		cp.reg.Upsert(s2.instance("stable"))
		waitFor(t, func() bool { return callsGo(t, client, "", 20)["stable-2"] > 0 })
	}
	if best > 100*time.Millisecond {
		t.Fatalf("best of 3: client off the deregistered instance after %v, want <= 100ms", best)
	}

	// Push status shows the client, its resources and ACKed versions.
	st := cp.ads.Status()
	if len(st) != 1 || st[0].NodeID != "client-1" || len(st[0].Types) != 4 {
		t.Fatalf("status %+v", st)
	}
	for _, ts := range st[0].Types {
		if ts.Resources == 0 || ts.VersionAcked == "" || len(ts.NACKs) != 0 {
			t.Fatalf("status of %s: %+v", ts.Type, ts)
		}
	}

	// A cluster grpc-go rejects is NACKed: the NACK shows the node and the
	// client's error, and the previous version stays in force.
	bad := xds.Cluster(xds.ClusterName(naming.ServiceKey{Namespace: "default", Name: "orders"}, "blue", 0), config.Policy{})
	bad.LbPolicy = clusterv3.Cluster_MAGLEV
	if _, err := cp.cache.Apply(xds.TypeCluster, []xds.Resource{{Name: bad.Name, Version: "bad", Message: bad}}, nil, "bad", time.Now()); err != nil {
		t.Fatal(err)
	}
	var nack xds.NACK
	waitFor(t, func() bool {
		for _, ts := range cp.ads.Status()[0].Types {
			if ts.Type == "clusters" && len(ts.NACKs) > 0 {
				nack = ts.NACKs[0]
				return true
			}
		}
		return false
	})
	if nack.Version != "bad" || !strings.Contains(nack.Message, "lbPolicy") {
		t.Fatalf("NACK %+v", nack)
	}
	if got := callsGo(t, client, "blue", 5); got["blue-1"] != 5 {
		t.Fatalf("after the NACK, x-group: blue reached %v", got)
	}
}

// moveOff deregisters b and returns how long the client kept reaching it.
func moveOff(t *testing.T, client testgrpc.TestServiceClient, reg *pushtest.Registry, b *backend) time.Duration {
	t.Helper()
	start := time.Now()
	reg.Delete(naming.ServiceKey{Namespace: "default", Name: "orders"}, b.name)
	last := time.Duration(0)
	deadline := start.Add(3 * time.Second)
	for time.Now().Before(deadline) {
		before := b.calls.Load()
		h, err := call(context.Background(), client, "")
		if err != nil {
			t.Fatalf("call after deregistering: %v", err)
		}
		if h == b.name || b.calls.Load() != before {
			last = time.Since(start)
			continue
		}
		if time.Since(start) > last+300*time.Millisecond {
			break // 300 ms of calls without reaching it
		}
	}
	return last
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSlowConfigDoesNotDelayEndpoints: while a config recomputation is
// held up (as Pilot's push context was for 1m20s in seed 001), an instance
// deregistration still reaches grpc-go's client.
func TestSlowConfigDoesNotDelayEndpoints(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	blue, s1, s2 := startBackend(t, "blue-1"), startBackend(t, "stable-1"), startBackend(t, "stable-2")
	reg := registryWith(t, ordersConfig)
	reg.Upsert(blue.instance("blue"), s1.instance("stable"), s2.instance("stable"))
	var hold atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	cp := startControlPlane(t, context.Background(), reg, func(e *push.Engine) {
		push.SetSlowConfig(e, func() {
			if hold.Load() {
				entered <- struct{}{}
				<-release
			}
		})
	})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	client := testgrpc.NewTestServiceClient(dial(t, cp, "client-slow"))
	// Both stable instances in rotation (grpc-go's round robin picks only
	// among connected ones: right after start, one may not be yet).
	waitFor(t, func() bool { return callsGo(t, client, "", 20)["stable-2"] > 0 })

	// A config change starts a recomputation that does not finish.
	hold.Store(true)
	changed, err := config.Decode([]byte(strings.Replace(ordersConfig, "x-group: {exact: blue}", "x-group: {exact: azure}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if changed[1].Key.String() != "VirtualService/default/orders" {
		t.Fatalf("wrong object %v", changed[1].Key)
	}
	reg.ApplyConfig(changed[1])
	<-entered

	took := moveOff(t, client, reg, s2)
	t.Logf("client off the deregistered instance after %v while the config round was held", took)
	if took > 2*time.Second {
		t.Fatalf("deregistration waited for the config round: %v", took)
	}
	// The held round has not published the new route yet.
	if got := callsGo(t, client, "blue", 3); got["blue-1"] != 3 {
		t.Fatalf("x-group: blue reached %v before the config round finished", got)
	}
	hold.Store(false)
	close(release)
	released = true
	waitFor(t, func() bool { return callsGo(t, client, "azure", 3)["blue-1"] == 3 })
}

func TestStatusHandler(t *testing.T) {
	s1 := startBackend(t, "stable-1")
	reg := pushtest.New(0)
	reg.Upsert(s1.instance("stable"))
	cp := startControlPlane(t, context.Background(), reg, nil)
	client := testgrpc.NewTestServiceClient(dial(t, cp, "status-node"))
	callsGo(t, client, "", 2)
	srv := httptest.NewServer(push.StatusHandler(cp.engine, cp.ads))
	defer srv.Close()
	var st push.Status
	waitFor(t, func() bool {
		resp, err := http.Get(srv.URL + "?node=status-node")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		st = push.Status{}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return len(st.Subscribers) == 1 && len(st.Subscribers[0].Types) == 4 && st.Subscribers[0].Types[3].VersionAcked != ""
	})
	if st.Revision != reg.Revision() || st.Engine.Resources["clusters"] != 1 || st.Subscribers[0].Address == "" {
		t.Fatalf("status %+v", st)
	}
}
