package gateway

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestControlPlaneClusters: the gateway reads every cluster Sextant's
// control plane publishes (internal/xds) with the policy it was given.
func TestControlPlaneClusters(t *testing.T) {
	for _, tc := range []struct{ policy, want string }{
		{"", "round_robin"},
		{config.PolicyRoundRobin, "round_robin"},
		{config.PolicyLeastRequest, "least_request"},
		{config.PolicyRandom, "random"},
		{config.PolicyAdaptive, "adaptive"},
		{config.PolicyPeakEWMA, "peak_ewma"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			s, err := decodeCluster(xds.Cluster("default/orders/v2", config.Policy{LoadBalancer: tc.policy}))
			if err != nil {
				t.Fatal(err)
			}
			if s.unsupported != "" || s.policy.name != tc.want {
				t.Fatalf("policy %q (unsupported %q), want %q", s.policy.name, s.unsupported, tc.want)
			}
			if s.service != "default/orders" || s.subsetName != "v2" {
				t.Fatalf("service %q, subset %q: want default/orders, v2", s.service, s.subsetName)
			}
		})
	}
}

// TestControlPlaneDefaults: the gateway reads the control plane's default
// outlier detection (unreachable endpoints only) and retry policy (another
// host, up to 5 picks), and an Istio rule's consecutive5xxErrors: 0 turns
// that detector off instead of being refused.
func TestControlPlaneDefaults(t *testing.T) {
	s, err := decodeCluster(xds.Cluster("default/orders", config.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	want := balancer.EjectionConfig{NoConsecutiveFailures: true, SplitLocalOrigin: true, ConsecutiveLocalOriginFailures: 5,
		BaseEjection: 30 * time.Second, MaxEjection: 300 * time.Second, MaxEjectedPercent: 10}
	if s.eject == nil || *s.eject != want {
		t.Fatalf("default ejection %+v, want %+v", s.eject, want)
	}
	s, err = decodeCluster(xds.Cluster("default/orders", config.Policy{Outlier: &networking.OutlierDetection{
		Consecutive_5XxErrors: wrapperspb.UInt32(0), ConsecutiveGatewayErrors: wrapperspb.UInt32(3)}}))
	if err != nil {
		t.Fatal(err)
	}
	if s.eject == nil || !s.eject.NoConsecutiveFailures || s.eject.SplitLocalOrigin {
		t.Fatalf("consecutive5xxErrors: 0 read as %+v", s.eject)
	}

	vh := xds.VirtualHost("orders", []string{"*"}, naming.ServiceKey{Namespace: "default", Name: "orders"}, nil,
		func(config.Destination) (string, bool) { return "default/orders", true }, nil)
	rs, err := decodeRetry(vh.GetRoutes()[0].GetRoute().GetRetryPolicy(), "retry_policy")
	if err != nil {
		t.Fatal(err)
	}
	if rs.num != 2 || !rs.otherHost || rs.hostPicks != 5 || !slices.Equal(rs.codes, []int{503}) ||
		!rs.retriable(reasonConnect, 0, -1, nil) || !rs.retriable("", 503, -1, nil) || rs.retriable("", 500, -1, nil) ||
		!rs.retriable("", 200, grpcUnavailable, nil) || !rs.retriable("", 200, grpcCancelled, nil) || rs.retriable("", 200, grpcInternal, nil) ||
		rs.retriable("", 200, grpcOK, nil) ||
		// refused-stream: a stream the endpoint did not process, not any reset.
		!rs.retriable(reasonReset, 0, -1, fmt.Errorf("gateway: %w", errRefusedStream)) || rs.retriable(reasonReset, 0, -1, io.ErrUnexpectedEOF) {
		t.Fatalf("default retry policy read as %+v", rs)
	}
}

// TestRetryPicksAnotherHost: with the previous_hosts predicate a retry's
// pick of a host already tried is handed back and picked again, up to the
// limit. Weighted round robin at 3:1 picks the tried host three times in a
// row at most, so four picks always reach the other one.
func TestRetryPicksAnotherHost(t *testing.T) {
	c := testCluster(t, "weighted_round_robin")
	var p pools
	defer p.closeAll()
	if err := c.setHosts([]hostSpec{{addr: "127.0.0.1:1", weight: 3, healthy: true}, {addr: "127.0.0.1:2", weight: 1, healthy: true}},
		&p, newMetrics()); err != nil {
		t.Fatal(err)
	}
	tried := []string{"127.0.0.1:1"}
	for i := range 40 {
		res, err := c.lb.Pick(nil)
		if err != nil {
			t.Fatal(err)
		}
		if res, _, err = pickAgain(c, nil, res, 0, tried, 3, 0); err != nil || res.Host.ID != "127.0.0.1:2" {
			t.Fatalf("retry %d picked %v (%v), want the other host", i, res.Host, err)
		}
		res.Done(0, balancer.Success)
	}
	// Without more picks the tried host stands.
	same := 0
	for range 40 {
		res, _ := c.lb.Pick(nil)
		if res.Host.ID == tried[0] {
			same++
		}
		res.Done(0, balancer.Success)
	}
	if same != 30 {
		t.Fatalf("plain picks reached the tried host %d of 40 times, want 30", same)
	}
}

// A DestinationRule's h2UpgradePolicy UPGRADE, as Sextant's control plane
// publishes it, makes the gateway speak HTTP/2 to the cluster (gRPC).
func TestHTTP2FromDestinationRule(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		s, err := decodeCluster(xds.Cluster("default/orders", config.Policy{HTTP2: h2}))
		if err != nil {
			t.Fatal(err)
		}
		if s.h2c != h2 {
			t.Fatalf("HTTP2 %v read as h2c %v", h2, s.h2c)
		}
	}
}

// TestPickWhileHostsReplaced: a rolling update replaces a cluster's hosts
// one set after another, always leaving some, while calls pick; no pick
// may find its host gone (the call would answer 503 "no healthy
// endpoint" with healthy hosts in the cluster). setHosts keeps a removed
// endpoint until the balancer no longer picks it, and a pick that still
// races a removal picks again.
func TestPickWhileHostsReplaced(t *testing.T) {
	c := testCluster(t, "round_robin")
	var p pools
	defer p.closeAll()
	mf := newMetrics()
	set := func(gen int) []hostSpec { // hosts gen..gen+3: each update replaces one
		hs := make([]hostSpec, 4)
		for i := range hs {
			hs[i] = hostSpec{addr: fmt.Sprintf("127.0.0.1:%d", 10000+gen+i), weight: 1, healthy: true}
		}
		return hs
	}
	if err := c.setHosts(set(0), &p, mf); err != nil {
		t.Fatal(err)
	}
	const updates = 2000
	done := make(chan struct{})
	var picks, failed atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				k := &call{c: c, retry: &retrySpec{}}
				res, _, ep := k.pick()
				picks.Add(1)
				if ep == nil {
					failed.Add(1)
					continue
				}
				res.Done(0, balancer.Success)
			}
		}()
	}
	for gen := 1; gen <= updates; gen++ {
		if err := c.setHosts(set(gen), &p, mf); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
	close(done)
	wg.Wait()
	if failed.Load() > 0 || picks.Load() == 0 {
		t.Fatalf("%d of %d picks during %d host replacements found no endpoint", failed.Load(), picks.Load(), updates)
	}
	t.Logf("%d picks during %d host replacements, none failed", picks.Load(), updates)
}

// testCluster is a cluster "c" without hosts balanced by policy.
func testCluster(t *testing.T, policy string) *clusterRT {
	t.Helper()
	spec := &clusterSpec{name: "c", policy: policySpec{name: policy}}
	pol, err := newPolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClusterRT(spec, pol, newMetrics().cluster("c"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
