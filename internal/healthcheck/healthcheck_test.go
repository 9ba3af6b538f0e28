package healthcheck

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/cockroachdb/pebble.(*DB).maybeScheduleFlush"))
}

// counting is the registry, counting the status writes asked for.
type counting struct {
	*registry.Registry
	mu     sync.Mutex
	writes map[string]int // status -> SetCheck calls
}

func (c *counting) SetCheck(ctx context.Context, id, check, status, output string) (int64, error) {
	c.mu.Lock()
	c.writes[status]++
	c.mu.Unlock()
	return c.Registry.SetCheck(ctx, id, check, status, output)
}

func (c *counting) count(status string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes[status]
}

// start opens a registry on a fresh store with a runner on it.
func start(t *testing.T) (*counting, *Runner) {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Wired as a server wires it: the runner is a tracker of the engine.
	reg := &counting{writes: map[string]int{}, Registry: registry.New(registry.Options{})}
	run := New(reg, Options{Workers: 4, FirstWithin: 50 * time.Millisecond})
	eng, err := commit.Open(st, commit.Options{
		Tables:    map[store.Kind]catalog.Table{store.Instances: reg.Table()},
		Trackers:  []commit.Tracker{reg.Registry, run},
		Pipelined: registry.Pipelined,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(eng); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; reg.Close(); eng.Close(); st.Close() })
	return reg, run
}

func register(t *testing.T, reg *counting, checks ...instance.Check) *instance.Instance {
	t.Helper()
	in := &instance.Instance{ID: "i1", Service: "web", Host: "127.0.0.1", Port: 1, Weight: 100, Checks: checks}
	if err := instance.Prepare(-1, in); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(context.Background(), []*instance.Instance{in}); err != nil {
		t.Fatal(err)
	}
	return in
}

// waitFor waits (bounded) until cond holds of instance i1, and returns when.
func waitFor(t *testing.T, reg *counting, what string, within time.Duration, cond func(in *instance.Instance) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if in := reg.Instances().Get("i1"); cond(in) {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	in := reg.Instances().Get("i1")
	if in != nil {
		t.Fatalf("%s: not within %v; instance healthy %v, checks %+v", what, within, in.Healthy, in.Checks)
	}
	t.Fatalf("%s: not within %v; instance gone", what, within)
	return 0
}

func status(check string) func(in *instance.Instance) bool {
	return func(in *instance.Instance) bool {
		return in != nil && in.Check("c") != nil && in.Check("c").Status == check
	}
}

// TestHTTPCheck: a passing endpoint turns its check passing; once it
// fails, the check turns critical after failures_before_critical failed
// probes (within interval x threshold, with slack for a loaded machine),
// the instance unhealthy; a 429 is a warning (healthy); recovery needs
// success_before_passing passes. Only the changes are written.
func TestHTTPCheck(t *testing.T) {
	t.Parallel()
	var code atomic.Int32
	code.Store(200)
	var probes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		if r.Header.Get("X-Check") != "yes" {
			w.WriteHeader(400)
			return
		}
		w.WriteHeader(int(code.Load()))
		w.Write([]byte("state " + http.StatusText(int(code.Load()))))
	}))
	defer srv.Close()
	reg, _ := start(t)
	register(t, reg, instance.Check{ID: "c", Type: instance.CheckHTTP, Target: srv.URL + "/health", Header: map[string][]string{"X-Check": {"yes"}},
		Interval: time.Second, FailuresBeforeCritical: 2, SuccessBeforePassing: 2})
	waitFor(t, reg, "passing", 20*time.Second, status(instance.StatusPassing))
	if in := reg.Instances().Get("i1"); !in.Healthy || !strings.Contains(in.Check("c").Output, "200 OK Output: state OK") {
		t.Fatalf("passing: healthy %v output %q", in.Healthy, in.Check("c").Output)
	}
	before := probes.Load()
	code.Store(500)
	took := waitFor(t, reg, "critical", 30*time.Second, status(instance.StatusCritical))
	if n := probes.Load() - before; n < 2 {
		t.Fatalf("critical after %d failed probes, failures_before_critical is 2", n)
	}
	t.Logf("critical %v after the endpoint failed (interval 1s x 2)", took)
	if in := reg.Instances().Get("i1"); in.Healthy || !strings.Contains(in.Check("c").Output, "500") {
		t.Fatalf("critical: healthy %v, output %q", in.Healthy, in.Check("c").Output)
	}
	code.Store(429)
	waitFor(t, reg, "warning", 30*time.Second, status(instance.StatusWarning))
	if !reg.Instances().Get("i1").Healthy {
		t.Fatal("a warning made the instance unhealthy")
	}
	code.Store(200)
	waitFor(t, reg, "recovery", 30*time.Second, status(instance.StatusPassing))
	// Let a few more probes pass: they write nothing.
	rev := reg.Instances().Get("i1").Revision
	n := probes.Load()
	for probes.Load() < n+3 {
		time.Sleep(50 * time.Millisecond)
	}
	if in := reg.Instances().Get("i1"); in.Revision != rev {
		t.Fatalf("passing probes wrote: revision %d -> %d", rev, in.Revision)
	}
	if got := reg.count(instance.StatusPassing) + reg.count(instance.StatusCritical) + reg.count(instance.StatusWarning); got != 4 {
		t.Fatalf("%d status writes for 4 changes (probes %d)", got, probes.Load())
	}
}

// TestTimeout: an endpoint slower than the check's timeout is critical,
// and the slow probe holds no other check up.
func TestTimeout(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stop)
	reg, _ := start(t)
	register(t, reg, instance.Check{ID: "c", Type: instance.CheckHTTP, Target: srv.URL, Interval: time.Second, Timeout: 100 * time.Millisecond, Status: instance.StatusPassing})
	waitFor(t, reg, "critical", 20*time.Second, status(instance.StatusCritical))
	if out := reg.Instances().Get("i1").Check("c").Output; !strings.Contains(out, "deadline exceeded") {
		t.Fatalf("output %q", out)
	}
}

// TestTCPAndGRPC: a tcp and a grpc check follow their targets.
func TestTCPAndGRPC(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("pkg.Svc", healthpb.HealthCheckResponse_SERVING)
	go srv.Serve(ln)
	defer srv.Stop()
	reg, _ := start(t)
	register(t, reg, instance.Check{ID: "c", Type: instance.CheckGRPC, Target: ln.Addr().String(), GRPCService: "pkg.Svc", Interval: time.Second},
		instance.Check{ID: "t", Type: instance.CheckTCP, Target: ln.Addr().String(), Interval: time.Second})
	waitFor(t, reg, "grpc and tcp passing", 20*time.Second, func(in *instance.Instance) bool {
		return in.Healthy && in.Check("c").Status == instance.StatusPassing && in.Check("t").Status == instance.StatusPassing
	})
	hs.SetServingStatus("pkg.Svc", healthpb.HealthCheckResponse_NOT_SERVING)
	waitFor(t, reg, "grpc critical", 20*time.Second, status(instance.StatusCritical))
	srv.Stop()
	waitFor(t, reg, "tcp critical", 20*time.Second, func(in *instance.Instance) bool { return in.Check("t").Status == instance.StatusCritical })
}

// TestTTLCheck: a ttl check stays passing while updated, turns critical
// once its ttl passes without an update, and passes again on an update.
func TestTTLCheck(t *testing.T) {
	t.Parallel()
	reg, _ := start(t)
	register(t, reg, instance.Check{ID: "c", Type: instance.CheckTTL, TTL: time.Second})
	ctx := context.Background()
	if _, err := reg.SetCheck(ctx, "i1", "c", instance.StatusPassing, "fine"); err != nil {
		t.Fatal(err)
	}
	for range 4 { // updated every 300ms: never expires
		time.Sleep(300 * time.Millisecond)
		if _, err := reg.SetCheck(ctx, "i1", "c", instance.StatusPassing, "fine"); err != nil {
			t.Fatal(err)
		}
		if in := reg.Instances().Get("i1"); in.Check("c").Status != instance.StatusPassing {
			t.Fatalf("expired while updated: %+v", in.Check("c"))
		}
	}
	took := waitFor(t, reg, "ttl expiry", 20*time.Second, status(instance.StatusCritical))
	if took < 500*time.Millisecond {
		t.Fatalf("expired %v after the last update, ttl 1s", took)
	}
	if out := reg.Instances().Get("i1").Check("c").Output; !strings.Contains(out, "TTL expired") {
		t.Fatalf("output %q", out)
	}
	if _, err := reg.SetCheck(ctx, "i1", "c", instance.StatusWarning, "back"); err != nil {
		t.Fatal(err)
	}
	if in := reg.Instances().Get("i1"); !in.Healthy {
		t.Fatal("unhealthy after a warning update")
	}
}

// TestDeregisterCritical: an instance whose check stays critical past its
// deregister_critical_service_after is deregistered.
func TestDeregisterCritical(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	reg, _ := start(t)
	register(t, reg, instance.Check{ID: "c", Type: instance.CheckTCP, Target: addr, Interval: time.Second, DeregisterCriticalServiceAfter: 2 * time.Second,
		Status: instance.StatusPassing})
	crit := waitFor(t, reg, "critical", 20*time.Second, status(instance.StatusCritical))
	took := waitFor(t, reg, "deregistered", 30*time.Second, func(in *instance.Instance) bool { return in == nil })
	if took < time.Second {
		t.Fatalf("deregistered %v after turning critical (%v), before its 2s", took, crit)
	}
}
