package gateway_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	envoytype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// hcUpstream is an upstream whose /healthz answers status (200 at first)
// and which counts the calls that are not health checks.
type hcUpstream struct {
	*upstream
	status atomic.Int32
	app    atomic.Int64
	checks atomic.Int64
}

func startHCUpstream(t *testing.T, name string) *hcUpstream {
	u := &hcUpstream{}
	u.status.Store(200)
	u.upstream = startUpstream(t, name, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			u.checks.Add(1)
			if r.Host != "hc.example" || r.Header.Get("X-Check") != "1" {
				w.WriteHeader(400) // the check's host and headers are part of the test
				return
			}
			w.WriteHeader(int(u.status.Load()))
			return
		}
		u.app.Add(1)
		fmt.Fprintf(w, "upstream=%s", name)
	})
	return u
}

func httpCheck(interval time.Duration, unhealthy, healthy uint32) *core.HealthCheck {
	return &core.HealthCheck{Timeout: durationpb.New(time.Second), Interval: durationpb.New(interval),
		UnhealthyThreshold: wrapperspb.UInt32(unhealthy), HealthyThreshold: wrapperspb.UInt32(healthy),
		IntervalJitterPercent: 10,
		HealthChecker: &core.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &core.HealthCheck_HttpHealthCheck{
			Path: "/healthz", Host: "hc.example",
			RequestHeadersToAdd: []*core.HeaderValueOption{{Header: &core.HeaderValue{Key: "X-Check", Value: "1"}}},
			ExpectedStatuses:    []*envoytype.Int64Range{{Start: 200, End: 300}}}}}
}

// clusterEndpoint is an endpoint of /v1/clusters.
type clusterEndpoint struct {
	Address     string `json:"address"`
	Healthy     bool   `json:"healthy"`
	HealthFlags string `json:"health_flags"`
	Checks      uint64 `json:"checks"`
	Output      string `json:"output"`
}

func (w *gw) endpointHealth(t *testing.T, clusterName, addr string) clusterEndpoint {
	t.Helper()
	resp, err := w.client.Get(w.admin + "/v1/clusters")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Clusters []struct {
			Name        string            `json:"name"`
			HealthCheck string            `json:"health_check"`
			Endpoints   []clusterEndpoint `json:"endpoints"`
		} `json:"clusters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, c := range out.Clusters {
		if c.Name != clusterName {
			continue
		}
		for _, e := range c.Endpoints {
			if e.Address == addr {
				return e
			}
		}
	}
	return clusterEndpoint{}
}

// drive sends n calls to / and counts the answers by upstream; any other
// answer fails the test.
func (w *gw) drive(t *testing.T, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		code, body, _ := w.get(t, "/")
		if code != 200 {
			t.Fatalf("answer %d %q", code, body)
		}
		seen[strings.TrimPrefix(body, "upstream=")]++
	}
	return seen
}

// TestActiveHealthCheckHTTP: an endpoint whose health endpoint starts
// failing leaves rotation at its next check (an answer outside
// expected_statuses fails a host at once, as in Envoy), takes no call
// afterwards, and returns after healthy_threshold passing checks.
func TestActiveHealthCheckHTTP(t *testing.T) {
	a, b := startHCUpstream(t, "a"), startHCUpstream(t, "b")
	cp := startControlPlane(t, "")
	const interval = 200 * time.Millisecond
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc"))),
		edsCluster("svc", func(c *cluster.Cluster) { c.HealthChecks = []*core.HealthCheck{httpCheck(interval, 3, 2)} }),
		assignment("svc", ep{u: a.upstream}, ep{u: b.upstream}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=a")
	g.waitServes(t, "/", "upstream=b")
	if e := g.endpointHealth(t, "svc", a.addr); e.HealthFlags != "healthy" || e.Checks == 0 {
		t.Fatalf("a before: %+v", e)
	}

	a.status.Store(503)
	start := time.Now()
	waitFor(t, "a failed by its check", func() bool {
		g.drive(t, 2) // traffic: the checks run at interval, not no_traffic_interval
		return strings.Contains(g.endpointHealth(t, "svc", a.addr).HealthFlags, "/failed_active_hc")
	})
	// One check (interval + 10% jitter + the check itself) after the change;
	// the slack is for a loaded machine.
	if took := time.Since(start); took > interval*11/10+2*time.Second {
		t.Errorf("a left rotation after %v", took)
	}
	before := a.app.Load()
	if seen := g.drive(t, 60); seen["a"] != 0 || seen["b"] != 60 {
		t.Fatalf("calls after a failed: %v", seen)
	}
	if a.app.Load() != before {
		t.Fatalf("a got %d calls after it failed its check", a.app.Load()-before)
	}
	if e := g.endpointHealth(t, "svc", a.addr); !strings.Contains(e.Output, "503") {
		t.Errorf("a's last check output: %q", e.Output)
	}
	if v := metric(t, g, `sextant_gateway_endpoint_health_check_failed{cluster="svc",endpoint="`+a.addr+`"}`); v != 1 {
		t.Errorf("a's health_check_failed gauge: %v", v)
	}
	if v := metric(t, g, `sextant_gateway_health_checks_total{cluster="svc",result="failure"}`); v < 1 {
		t.Errorf("failed checks counted: %v", v)
	}

	a.status.Store(200)
	waitFor(t, "a back in rotation", func() bool { return g.drive(t, 4)["a"] > 0 })
	if e := g.endpointHealth(t, "svc", a.addr); e.HealthFlags != "healthy" {
		t.Errorf("a after: %+v", e)
	}
}

// TestActiveHealthCheckTCPListenerClosed: an endpoint whose listener
// closes leaves rotation within interval x unhealthy_threshold, takes no
// call afterwards, and returns once it listens again.
func TestActiveHealthCheckTCPListenerClosed(t *testing.T) {
	a := startHCUpstream(t, "a")
	// b is a listener the test closes and reopens on the same port.
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var bCalls atomic.Int64
	bh := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { bCalls.Add(1); fmt.Fprint(w, "upstream=b") })
	bsrv := &http.Server{Handler: bh}
	go func() { _ = bsrv.Serve(bln) }()
	t.Cleanup(func() { _ = bsrv.Close() })
	baddr := bln.Addr().String()
	bu := &upstream{addr: baddr, host: "127.0.0.1", port: uint32(bln.Addr().(*net.TCPAddr).Port)}

	const interval, threshold = 200 * time.Millisecond, 2
	tcp := &core.HealthCheck{Timeout: durationpb.New(time.Second), Interval: durationpb.New(interval),
		UnhealthyThreshold: wrapperspb.UInt32(threshold), HealthyThreshold: wrapperspb.UInt32(1),
		NoTrafficInterval: durationpb.New(interval),
		HealthChecker:     &core.HealthCheck_TcpHealthCheck_{TcpHealthCheck: &core.HealthCheck_TcpHealthCheck{}}}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc"))),
		edsCluster("svc", func(c *cluster.Cluster) { c.HealthChecks = []*core.HealthCheck{tcp} }),
		assignment("svc", ep{u: a.upstream}, ep{u: bu}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=a")
	g.waitServes(t, "/", "upstream=b")

	_ = bsrv.Close() // the listener and its connections
	start := time.Now()
	waitFor(t, "b failed by its check", func() bool {
		return strings.Contains(g.endpointHealth(t, "svc", baddr).HealthFlags, "/failed_active_hc")
	})
	if took := time.Since(start); took > interval*threshold*11/10+2*time.Second {
		t.Errorf("b left rotation after %v", took)
	}
	if seen := g.drive(t, 60); seen["a"] != 60 {
		t.Fatalf("calls after b failed: %v", seen)
	}

	var ln net.Listener
	waitFor(t, "b's port again", func() bool { ln, err = net.Listen("tcp", baddr); return err == nil })
	bsrv2 := &http.Server{Handler: bh}
	go func() { _ = bsrv2.Serve(ln) }()
	t.Cleanup(func() { _ = bsrv2.Close() })
	n := bCalls.Load()
	waitFor(t, "b back in rotation", func() bool { return g.drive(t, 4)["b"] > 0 })
	if bCalls.Load() == n {
		t.Fatal("b answered without being called")
	}
}

// TestActiveHealthCheckWithEDSHealth: a host takes calls only while EDS
// does not mark it unhealthy and its check has not failed it.
func TestActiveHealthCheckWithEDSHealth(t *testing.T) {
	a, b := startHCUpstream(t, "a"), startHCUpstream(t, "b")
	cp := startControlPlane(t, "")
	cl := edsCluster("svc", func(c *cluster.Cluster) { c.HealthChecks = []*core.HealthCheck{httpCheck(100*time.Millisecond, 1, 1)} })
	rs := []typesResource{rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc"))), cl}
	cp.set(append(rs, assignment("svc", ep{u: a.upstream, healthy: core.HealthStatus_UNHEALTHY}, ep{u: b.upstream}))...)
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=b")
	// b may serve before a's first check has ended (a loaded machine).
	waitFor(t, "a's first check", func() bool { return g.endpointHealth(t, "svc", a.addr).Checks > 0 })
	if e := g.endpointHealth(t, "svc", a.addr); e.HealthFlags != "/failed_eds_health" || e.Checks == 0 {
		t.Fatalf("a: %+v (checked, passing, but EDS says unhealthy)", e)
	}
	if seen := g.drive(t, 20); seen["b"] != 20 {
		t.Fatalf("calls: %v", seen)
	}
	// EDS turns a healthy while its check fails: still out.
	a.status.Store(500)
	waitFor(t, "a failed", func() bool {
		return strings.Contains(g.endpointHealth(t, "svc", a.addr).HealthFlags, "/failed_active_hc")
	})
	cp.set(append(rs, assignment("svc", ep{u: a.upstream}, ep{u: b.upstream}))...)
	waitFor(t, "EDS health applied", func() bool {
		return g.endpointHealth(t, "svc", a.addr).HealthFlags == "/failed_active_hc"
	})
	if seen := g.drive(t, 20); seen["b"] != 20 {
		t.Fatalf("calls: %v", seen)
	}
	a.status.Store(200)
	waitFor(t, "a in rotation", func() bool { return g.drive(t, 4)["a"] > 0 })
}

// TestActiveHealthCheckGRPC: a grpc_health_check asks grpc-go's own health
// service about service_name: NOT_SERVING fails the endpoint at its next
// check, SERVING brings it back.
func TestActiveHealthCheckGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("orders", healthpb.HealthCheckResponse_SERVING)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	addr := ln.Addr().String()
	u := &upstream{addr: addr, host: "127.0.0.1", port: uint32(ln.Addr().(*net.TCPAddr).Port)}
	const interval = 100 * time.Millisecond
	check := &core.HealthCheck{Timeout: durationpb.New(time.Second), Interval: durationpb.New(interval),
		NoTrafficInterval:  durationpb.New(interval),
		UnhealthyThreshold: wrapperspb.UInt32(3), HealthyThreshold: wrapperspb.UInt32(1),
		HealthChecker: &core.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &core.HealthCheck_GrpcHealthCheck{ServiceName: "orders"}}}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc"))),
		edsCluster("svc", func(c *cluster.Cluster) { c.HealthChecks = []*core.HealthCheck{check} }),
		assignment("svc", ep{u: u}))
	g := startGateway(t, cp.addr)
	waitFor(t, "the endpoint checked healthy", func() bool { return g.endpointHealth(t, "svc", addr).HealthFlags == "healthy" })
	hs.SetServingStatus("orders", healthpb.HealthCheckResponse_NOT_SERVING)
	start := time.Now()
	waitFor(t, "NOT_SERVING to fail it", func() bool {
		return strings.Contains(g.endpointHealth(t, "svc", addr).HealthFlags, "/failed_active_hc")
	})
	// At once (not after 3 checks): NOT_SERVING is an answer.
	if took := time.Since(start); took > 2*interval+2*time.Second {
		t.Errorf("failed after %v", took)
	}
	if e := g.endpointHealth(t, "svc", addr); !strings.Contains(e.Output, "NOT_SERVING") {
		t.Errorf("output %q", e.Output)
	}
	hs.SetServingStatus("orders", healthpb.HealthCheckResponse_SERVING)
	waitFor(t, "SERVING to bring it back", func() bool { return g.endpointHealth(t, "svc", addr).HealthFlags == "healthy" })
	// An unknown service: NOT_FOUND is an answer too.
	check.GetGrpcHealthCheck().ServiceName = "unknown"
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc"))),
		edsCluster("svc", func(c *cluster.Cluster) { c.HealthChecks = []*core.HealthCheck{check} }),
		assignment("svc", ep{u: u}))
	waitFor(t, "NOT_FOUND to fail it", func() bool {
		e := g.endpointHealth(t, "svc", addr)
		return strings.Contains(e.HealthFlags, "/failed_active_hc") && strings.Contains(e.Output, "NotFound")
	})
}
