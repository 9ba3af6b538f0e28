package gateway

import (
	"errors"
	"math"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestDecodeCircuit: the thresholds and per-connection settings the
// control plane publishes for a connectionPool are what the gateway
// enforces; Istio's defaults (the largest values) are no limit.
func TestDecodeCircuit(t *testing.T) {
	spec := func(p config.Policy) *clusterSpec {
		t.Helper()
		s, err := decodeCluster(xds.Cluster("default/httpbin", p))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := spec(config.Policy{})
	if s.circuit.limited() || s.conn != (connOpts{}) || s.budget != (retryBudget{percent: 20, min: 3}) {
		t.Errorf("defaults: %+v %+v %+v, want no limit and the default retry budget", s.circuit, s.conn, s.budget)
	}
	s = spec(config.Policy{Circuit: config.Circuit{MaxConnections: 1, MaxPendingRequests: 2, MaxRequests: 3, MaxRetries: 4,
		MaxRequestsPerConnection: 5, MaxConnectionDuration: time.Minute, Keepalive: true, KeepaliveProbes: 6, KeepaliveTime: 7 * time.Second}})
	if want := (circuitSpec{set: true, maxConns: 1, maxPending: 2, maxRequests: 3}); s.circuit != want {
		t.Errorf("circuit %+v, want %+v", s.circuit, want)
	}
	if want := (connOpts{maxRequests: 5, maxDuration: time.Minute, keepalive: true, kaProbes: 6, kaIdle: 7 * time.Second}); s.conn != want {
		t.Errorf("conn %+v, want %+v", s.conn, want)
	}
	// The DestinationRule's http.idleTimeout: the pool's idle time, with the
	// per-connection limits (typed options) or without them.
	for _, p := range []config.Policy{{IdleTimeout: 5 * time.Second}, {IdleTimeout: 5 * time.Second, Circuit: config.Circuit{MaxRequestsPerConnection: 2}}} {
		if s = spec(p); s.conn.idle != 5*time.Second || s.conn.idleTimeout() != 5*time.Second {
			t.Errorf("idleTimeout 5s (%+v): conn %+v", p.Circuit, s.conn)
		}
	}
	if (connOpts{}).idleTimeout() != 60*time.Second || (connOpts{idle: -1}).idleTimeout() < 24*time.Hour {
		t.Error("idle_timeout unset: want 60 s; 0s (disabled): want no idle close")
	}
	s = spec(config.Policy{Circuit: config.Circuit{MaxRequests: 3, MaxRetries: 4,
		MaxRequestsPerConnection: 5, MaxConnectionDuration: time.Minute, Keepalive: true, KeepaliveProbes: 6, KeepaliveTime: 7 * time.Second}})
	if want := (retryBudget{min: 4}); s.budget != want {
		t.Errorf("max_retries 4: budget %+v, want %+v", s.budget, want)
	}
	// A DestinationRule's retryBudget replaces max_retries, as in Envoy.
	s = spec(config.Policy{Circuit: config.Circuit{MaxRetries: 4, RetryBudget: true, RetryBudgetPercent: 50, RetryBudgetMin: 5}})
	if want := (retryBudget{percent: 50, min: 5}); s.budget != want {
		t.Errorf("retryBudget 50%%/5: budget %+v, want %+v", s.budget, want)
	}
}

func testCircuit(t *testing.T, s circuitSpec, h2c bool) (*circuit, *clusterMetrics) {
	t.Helper()
	m := newMetrics().cluster("c")
	cb := newCircuit(&clusterSpec{circuit: s, h2c: h2c}, m)
	if cb == nil {
		t.Fatal("no circuit")
	}
	return cb, m
}

// TestDecodeLocalOrigin: outlierDetection's splitExternalLocalOriginErrors
// and consecutiveLocalOriginFailures, as published, eject an endpoint
// after that many local-origin failures in a row (and not for its 5xx).
func TestDecodeLocalOrigin(t *testing.T) {
	s, err := decodeCluster(xds.Cluster("default/httpbin", config.Policy{Outlier: &networking.OutlierDetection{
		SplitExternalLocalOriginErrors: true, ConsecutiveLocalOriginFailures: wrapperspb.UInt32(2), Consecutive_5XxErrors: wrapperspb.UInt32(0)}}))
	if err != nil {
		t.Fatal(err)
	}
	if e := s.eject; e == nil || !e.SplitLocalOrigin || e.ConsecutiveLocalOriginFailures != 2 || e.NoLocalOriginFailures || !e.NoConsecutiveFailures {
		t.Fatalf("ejection %+v, want local-origin failures apart, 2 in a row, no 5xx ejection", e)
	}
}

// TestCircuitPending: with one connection and one pending slot, a second
// attempt waits for the first's connection, a third overflows; a waiter
// gives up at its deadline; an HTTP/2 cluster limits requests only.
func TestCircuitPending(t *testing.T) {
	cb, m := testCircuit(t, circuitSpec{set: true, maxConns: 1, maxPending: 1, maxRequests: math.MaxInt64}, false)
	if err := cb.enter(time.Time{}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- cb.enter(time.Time{}) }()
	for cb.pending.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	if err := cb.enter(time.Time{}); !errors.Is(err, errOverflow) {
		t.Fatalf("third: %v, want overflow", err)
	}
	if n := counterValue(m.overflow[overflowPending]); n != 1 {
		t.Fatalf("pending overflow %v, want 1", n)
	}
	cb.leave()
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	// A waiter whose deadline passes gets a timeout, and leaves nothing
	// taken behind.
	if err := cb.enter(time.Now().Add(20 * time.Millisecond)); !errors.Is(err, fasthttp.ErrTimeout) {
		t.Fatalf("deadline: %v, want timeout", err)
	}
	cb.leave()
	if cb.requests.Load() != 0 || cb.pending.Load() != 0 || len(cb.conns) != 0 {
		t.Fatalf("left behind: requests %d pending %d conns %d", cb.requests.Load(), cb.pending.Load(), len(cb.conns))
	}
	if n := counterValue(m.overflow[overflowConns]); n != 3 { // the waiter, the overflow, the one timed out
		t.Fatalf("connection waits %v, want 3", n)
	}

	h2, _ := testCircuit(t, circuitSpec{set: true, maxConns: 1, maxPending: 1, maxRequests: 2}, true)
	for range 2 {
		if err := h2.enter(time.Time{}); err != nil {
			t.Fatalf("h2: %v", err)
		}
	}
	if err := h2.enter(time.Time{}); !errors.Is(err, errOverflow) {
		t.Fatalf("h2 third request: %v, want overflow (max_requests 2)", err)
	}
}

// TestCircuitAllocs: passing the circuit breakers allocates nothing.
func TestCircuitAllocs(t *testing.T) {
	cb, _ := testCircuit(t, circuitSpec{set: true, maxConns: 100, maxPending: 1, maxRequests: 100}, false)
	if n := testing.AllocsPerRun(1000, func() {
		if cb.enter(time.Time{}) == nil {
			cb.leave()
		}
	}); n != 0 {
		t.Fatalf("%v allocs per call, want 0", n)
	}
}

// TestConnSpent: a connection of a pool with max_requests_per_connection N
// is spent after its Nth request; one with max_connection_duration once
// that time has passed since it was dialed, whatever its requests.
func TestConnSpent(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	dial := connOpts{maxRequests: 2}.dialer(func(string) (net.Conn, error) { return a, nil })
	c, err := dial("x")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if connSpent(c, now) || !connSpent(c, now) {
		t.Fatal("want spent after the second request")
	}
	if connSpent(a, now) || connExpired(a, now) {
		t.Fatal("a plain connection is never spent")
	}
	dial = connOpts{maxDuration: time.Minute}.dialer(func(string) (net.Conn, error) { return a, nil })
	if c, err = dial("x"); err != nil {
		t.Fatal(err)
	}
	now = time.Now()
	for range 100 {
		if connSpent(c, now) || connExpired(c, now) {
			t.Fatal("spent within its duration")
		}
	}
	if later := now.Add(time.Minute + time.Second); !connExpired(c, later) || !connSpent(c, later) {
		t.Fatal("want spent once its duration passed")
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// BenchmarkCircuitEnter: one attempt through an HTTP/1.1 cluster's circuit
// breakers (a request, a connection slot), from parallel callers.
func BenchmarkCircuitEnter(b *testing.B) {
	cb := newCircuit(&clusterSpec{circuit: circuitSpec{set: true, maxConns: 1 << 20, maxPending: 1, maxRequests: 1 << 20}}, newMetrics().cluster("c"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if cb.enter(time.Time{}) != nil {
				b.Error("overflow")
				return
			}
			cb.leave()
		}
	})
}
