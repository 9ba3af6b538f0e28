package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/xds"
)

// rawUpstream accepts connections and hands each to fn (faults HTTP servers
// cannot produce: resets mid-body, hangs).
func rawUpstream(t *testing.T, fn func(net.Conn)) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{name: "raw", addr: ln.Addr().String()}
	tcp := ln.Addr().(*net.TCPAddr)
	u.host, u.port = tcp.IP.String(), uint32(tcp.Port)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.calls.Add(1)
			go fn(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return u
}

// closedPort is an address nothing listens on.
func closedPort(t *testing.T) *upstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcp := ln.Addr().(*net.TCPAddr)
	ln.Close()
	return &upstream{name: "closed", addr: tcp.String(), host: tcp.IP.String(), port: uint32(tcp.Port)}
}

func timeoutRoute(prefix, clusterName string, timeout time.Duration, rp *route.RetryPolicy) *route.Route {
	r := prefixRoute(prefix, clusterName)
	r.GetRoute().Timeout = durationpb.New(timeout)
	r.GetRoute().RetryPolicy = rp
	return r
}

func TestFaults(t *testing.T) {
	good := startUpstream(t, "good", nil)
	refuses := closedPort(t)
	var hangs []net.Conn
	hangDone := make(chan struct{})
	t.Cleanup(func() { close(hangDone) })
	hang := rawUpstream(t, func(c net.Conn) {
		<-hangDone // never answers until the test ends
		c.Close()
	})
	_ = hangs
	reset := rawUpstream(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			c.Close()
			return
		}
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial"))
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, not FIN
		}
		c.Close()
	})
	slow := startUpstream(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(150 * time.Millisecond)
		w.Write([]byte("upstream=slow"))
	})
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"},
		timeoutRoute("/refuses", "refuses", time.Second, nil),
		timeoutRoute("/hangs", "hangs", 200*time.Millisecond, nil),
		timeoutRoute("/reset", "reset", time.Second, nil),
		timeoutRoute("/slow", "slow", 2*time.Second, nil),
		timeoutRoute("/empty", "empty", time.Second, nil),
		timeoutRoute("/missing", "nosuchcluster", time.Second, nil),
		prefixRoute("/good", "good"))),
		edsCluster("refuses"), edsCluster("hangs"), edsCluster("reset"), edsCluster("slow"), edsCluster("good"), edsCluster("empty"),
		assignment("refuses", ep{u: refuses}), assignment("hangs", ep{u: hang}), assignment("reset", ep{u: reset}),
		assignment("slow", ep{u: slow}), assignment("good", ep{u: good}), assignment("empty"))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/good", "upstream=good")
	g.waitEndpoints(t, 6)

	for _, tc := range []struct {
		path, reason, cluster string
		code                  int
	}{
		{"/refuses", "connect_failure", "refuses", 502},
		{"/hangs", "upstream_timeout", "hangs", 504},
		{"/reset", "upstream_reset", "reset", 502},
		{"/empty", "no_healthy_endpoint", "empty", 503},
		{"/missing", "cluster_not_found", "nosuchcluster", 503},
		{"/nothing-here", "", "", 200}, // /good is a prefix of nothing here: falls to 404 below
	} {
		if tc.reason == "" {
			continue
		}
		t.Run(tc.path, func(t *testing.T) {
			start := time.Now()
			code, body, h := g.get(t, tc.path)
			if code != tc.code || h.Get("X-Sextant-Error") != tc.reason ||
				!strings.Contains(body, `"cluster":"`+tc.cluster+`"`) || !strings.Contains(body, `"reason":"`+tc.reason+`"`) {
				t.Fatalf("got %d %q (%s), want %d %s naming %s", code, body, h.Get("X-Sextant-Error"), tc.code, tc.reason, tc.cluster)
			}
			if tc.reason == "upstream_timeout" && time.Since(start) > 5*time.Second {
				t.Errorf("timeout took %v", time.Since(start))
			}
		})
	}
	if code, body, _ := g.get(t, "/slow"); code != 200 || body != "upstream=slow" {
		t.Errorf("slow upstream within the timeout: %d %q", code, body)
	}
	if code, _, h := g.get(t, "/zzz"); code != 404 || h.Get("X-Sextant-Error") != "no_route" {
		t.Errorf("no route: %d %v", code, h)
	}
	// The gateway still serves after every fault.
	if code, _, _ := g.get(t, "/good"); code != 200 {
		t.Errorf("after faults: %d", code)
	}
}

func TestRetriesAndPerTryTimeout(t *testing.T) {
	var failing atomic.Int64
	bad := startUpstream(t, "bad", func(w http.ResponseWriter, r *http.Request) {
		failing.Add(1)
		w.WriteHeader(500)
	})
	good := startUpstream(t, "good", nil)
	hangDone := make(chan struct{})
	t.Cleanup(func() { close(hangDone) })
	hang := rawUpstream(t, func(c net.Conn) { <-hangDone; c.Close() })
	cp := startControlPlane(t, "")
	rr := func(c *cluster.Cluster) { c.LbPolicy = cluster.Cluster_ROUND_ROBIN }
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"},
		timeoutRoute("/retry", "mixed", 2*time.Second, &route.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(2)}),
		timeoutRoute("/noretry", "mixed", 2*time.Second, nil),
		timeoutRoute("/pertry", "slowmix", 3*time.Second, &route.RetryPolicy{RetryOn: "gateway-error",
			NumRetries: wrapperspb.UInt32(1), PerTryTimeout: durationpb.New(100 * time.Millisecond)}),
		timeoutRoute("/allbad", "bad", 2*time.Second, &route.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(3)}))),
		edsCluster("mixed", rr), edsCluster("slowmix", rr), edsCluster("bad"),
		assignment("mixed", ep{u: bad}, ep{u: good}), assignment("slowmix", ep{u: hang}, ep{u: good}), assignment("bad", ep{u: bad}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/retry", "upstream=good")
	g.waitEndpoints(t, 3)

	for range 20 {
		if code, body, _ := g.get(t, "/retry"); code != 200 || body != "upstream=good path=/retry" {
			t.Fatalf("with retries: %d %q", code, body)
		}
	}
	fails := 0
	for range 20 {
		if code, _, _ := g.get(t, "/noretry"); code == 500 {
			fails++
		}
	}
	if fails == 0 {
		t.Errorf("without a retry policy no 500 came through (round robin over a failing endpoint)")
	}
	for range 6 {
		start := time.Now()
		code, body, _ := g.get(t, "/pertry")
		if code != 200 || !strings.Contains(body, "upstream=good") {
			t.Fatalf("per-try timeout then retry: %d %q", code, body)
		}
		if time.Since(start) > 2500*time.Millisecond {
			t.Fatalf("per-try timeout not applied: %v", time.Since(start))
		}
	}
	before := failing.Load()
	code, _, _ := g.get(t, "/allbad")
	if code != 500 {
		t.Fatalf("retries exhausted: got %d, want the upstream's 500", code)
	}
	if n := failing.Load() - before; n != 4 {
		t.Fatalf("num_retries 3: the upstream saw %d attempts, want 4", n)
	}
}

func TestOutlierEjectionStopsCallsToFailingEndpoint(t *testing.T) {
	var broken atomic.Bool
	sick := startUpstream(t, "sick", func(w http.ResponseWriter, r *http.Request) {
		if broken.Load() {
			w.WriteHeader(500)
			return
		}
		w.Write([]byte("upstream=sick"))
	})
	well := startUpstream(t, "well", nil)
	cp := startControlPlane(t, "")
	od := func(c *cluster.Cluster) {
		c.LbPolicy = cluster.Cluster_ROUND_ROBIN
		c.OutlierDetection = &cluster.OutlierDetection{Consecutive_5Xx: wrapperspb.UInt32(3),
			BaseEjectionTime: durationpb.New(time.Minute), MaxEjectionPercent: wrapperspb.UInt32(50)}
	}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "svc"))),
		edsCluster("svc", od), assignment("svc", ep{u: sick}, ep{u: well}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "upstream=sick")
	broken.Store(true)
	for range 20 { // 3 failures in a row eject it
		g.get(t, "/")
	}
	before := sick.calls.Load()
	for range 50 {
		if code, body, _ := g.get(t, "/"); code != 200 || !strings.Contains(body, "upstream=well") {
			t.Fatalf("after ejection: %d %q", code, body)
		}
	}
	if n := sick.calls.Load() - before; n != 0 {
		t.Fatalf("the ejected endpoint got %d calls", n)
	}
	resp, err := http.Get(g.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), `sextant_gateway_ejections_total{cluster="svc"} 1`) {
		t.Errorf("/metrics lacks the ejection")
	}
}

func TestRetryBudgetCapsConcurrentRetries(t *testing.T) {
	var attempts atomic.Int64
	bad := startUpstream(t, "bad", func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		time.Sleep(100 * time.Millisecond)
		w.WriteHeader(503)
	})
	cp := startControlPlane(t, "")
	budget := func(c *cluster.Cluster) {
		c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
			RetryBudget: &cluster.CircuitBreakers_Thresholds_RetryBudget{MinRetryConcurrency: wrapperspb.UInt32(1),
				BudgetPercent: &typev3.Percent{Value: 0}}}}}
	}
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"},
		timeoutRoute("/", "bad", 10*time.Second, &route.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(5)}))),
		edsCluster("bad", budget), assignment("bad", ep{u: bad}))
	g := startGateway(t, cp.addr)
	waitFor(t, "config", func() bool { code, _, h := g.get(t, "/"); return code == 503 && h.Get("X-Sextant-Error") == "" })
	// 10 concurrent failing calls, 5 retries each, but one retry in flight
	// at a time: without the budget the upstream would see 60 attempts.
	before := attempts.Load()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", g.url+"/", nil)
			if resp, err := g.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if n := attempts.Load() - before; n < 11 || n > 25 {
		t.Fatalf("10 calls under a 1-retry budget made %d attempts, want 10 first tries plus a few retries", n)
	}
}

// TestDefaultRetryDoesNotResendAReset: under Istio's default retry policy
// (every route's, unless its VirtualService sets retries) a POST whose
// upstream reset the connection after reading it is not sent again: the
// upstream may have acted on it. refused-stream, in that policy, is an
// HTTP/2 REFUSED_STREAM only, as in Envoy.
func TestDefaultRetryDoesNotResendAReset(t *testing.T) {
	reset := rawUpstream(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // RST, not FIN
			}
		}
		c.Close()
	})
	good := startUpstream(t, "good", nil)
	rp := &route.RetryPolicy{RetryOn: xds.DefaultRetryOn, NumRetries: wrapperspb.UInt32(2), RetriableStatusCodes: []uint32{503}}
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"},
		timeoutRoute("/reset", "reset", 2*time.Second, rp),
		prefixRoute("/good", "good"))),
		edsCluster("reset"), edsCluster("good"),
		assignment("reset", ep{u: reset}), assignment("good", ep{u: good}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/good", "upstream=good")
	g.waitEndpoints(t, 2)
	before := reset.calls.Load()
	resp, err := g.client.Post(g.url+"/reset", "application/json", strings.NewReader(`{"order":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.Header.Get("X-Sextant-Error") != "upstream_reset" {
		t.Fatalf("reset upstream: %d %s, want 502 upstream_reset", resp.StatusCode, resp.Header.Get("X-Sextant-Error"))
	}
	if n := reset.calls.Load() - before; n != 1 {
		t.Fatalf("the upstream got the POST %d times under the default policy, want once", n)
	}
}
