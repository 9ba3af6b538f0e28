package gateway

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	gw "github.com/sextant-mesh/sextant/internal/gateway"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"go.uber.org/goleak"

	benchbal "github.com/sextant-mesh/sextant/internal/bench/balancer"
)

func TestParseWrk(t *testing.T) {
	out := `Running 8s test @ http://127.0.0.1:1/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.02ms    1.10ms  40.00ms   90.00%
  Latency Distribution
     50%    2.54ms
     75%    3.00ms
     90%    4.00ms
     99%  812.00us
  171787 requests in 8.00s, 197.33MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 5
Requests/sec:  21473.38
Transfer/sec:     24.67MB
`
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.rps != 21473.38 || r.requests != 171787 || r.p50 != 2.54 || r.p99 != 0.812 || r.errors != 8 {
		t.Fatalf("%+v", r)
	}
	if _, err := parseWrk("garbage"); err == nil {
		t.Fatal("no error for garbage")
	}
}

// The race through a real in-process gateway, shortened: every call is
// answered through the gateway and adaptive beats random's rejections.
func TestRaceThroughGateway(t *testing.T) {
	f, err := benchbal.ParseProviders([]byte(`{"threads":{"a":40,"b":80},"phase_seconds":1,
		"phases":{"a":[{"max_concurrent":16,"avg_rtt_ms":5},{"max_concurrent":8,"avg_rtt_ms":5}],
		"b":[{"max_concurrent":32,"avg_rtt_ms":5},{"max_concurrent":40,"avg_rtt_ms":5}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := benchbal.Config{Providers: f, Policies: []string{"adaptive", "random"}, Scale: 8,
		Warmup: 200 * time.Millisecond, Phase: 400 * time.Millisecond, Timeout: time.Second, Seed: 1,
		Proxy: RaceProxy(time.Second)}
	res, err := benchbal.Run(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Successes == 0 || r.Errors != 0 {
			t.Fatalf("%s through the gateway: %+v", r.Policy, r)
		}
	}
	if res[0].Rejections > res[1].Rejections {
		t.Errorf("adaptive got %d provider rejections, random %d", res[0].Rejections, res[1].Rejections)
	}
}

func TestConfigLatency(t *testing.T) {
	r, err := RunConfigLatency(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.Updates != 5 || r.P99Ms <= 0 || r.P99Ms > 10000 {
		t.Fatalf("%+v", r)
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp's and grpc-go's process-wide background goroutines.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.NewCallbackSerializer.func1"),
	)
}

// The TLS listener and certificate the bench publishes for sextant-tls are
// ones the gateway accepts.
func TestTLSConfigAccepted(t *testing.T) {
	cert, err := newBenchCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []proto.Message{benchTLSListener(8443), benchSecret(cert)} {
		a, _ := anypb.New(m)
		decoded := false
		for _, typ := range gw.XDSTypes() {
			if typ.URL == a.TypeUrl {
				if _, _, err := typ.Decode(a); err != nil {
					t.Errorf("%s refused: %v", a.TypeUrl, err)
				}
				decoded = true
			}
		}
		if !decoded {
			t.Errorf("the gateway follows no %s", a.TypeUrl)
		}
	}
}

func TestParseH2load(t *testing.T) {
	out := `starting benchmark...
spawning thread #0: 4 total client(s). Timing-based test with 0s of warm-up time and 10s of main duration for measurements.
Warm-up phase is over for thread #0.
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 10.00s, 14619.50 req/s, 16.03MB/s
requests: 146195 total, 146595 started, 146195 done, 146190 succeeded, 5 failed, 0 errored, 0 timeout
status codes: 146190 2xx, 0 3xx, 5 4xx, 0 5xx
traffic: 160.33MB (168115335) total, 1.26MB (1318251) headers (space savings 90.45%), 142.77MB (149703680) data
`
	r, err := parseH2load(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.rps != 14619.5 || r.requests != 146190 || r.errors != 5 {
		t.Errorf("%+v", r)
	}
	if _, err := parseH2load("h2load: connection refused\n"); err == nil {
		t.Error("no figures read from a failure")
	}
}

// The cluster with TLS to its endpoints and the CA secret the upstream-tls
// scenario publishes are ones the gateway accepts and can use.
func TestUpstreamTLSConfigAccepted(t *testing.T) {
	cert, err := newBenchCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, ca := upstreamTLSCluster(cert)
	for _, m := range []proto.Message{c, ca} {
		a, _ := anypb.New(m)
		for _, typ := range gw.XDSTypes() {
			if typ.URL != a.TypeUrl {
				continue
			}
			_, v, err := typ.Decode(a)
			if err != nil {
				t.Fatalf("%s refused: %v", a.TypeUrl, err)
			}
			if s := fmt.Sprintf("%+v", v); strings.Contains(s, "not sent in plaintext") {
				t.Fatalf("the cluster is unusable: %s", s)
			}
		}
	}
}

// The dataplane figure's ratios pair the runs of one round, and the
// median of an even count is the middle pair's mean.
func TestDataplaneSummarize(t *testing.T) {
	f := DataplaneFigure{Runs: []DataplaneRun{
		{Round: 1, Proxy: "sextant", RequestsPS: 100, CPUUsPerReq: 20}, {Round: 1, Proxy: "nginx", RequestsPS: 200, CPUUsPerReq: 10},
		{Round: 2, Proxy: "nginx", RequestsPS: 100, CPUUsPerReq: 10}, {Round: 2, Proxy: "sextant", RequestsPS: 100, CPUUsPerReq: 10},
	}}
	f.summarize([]string{"sextant", "nginx"})
	want := map[string][]float64{"cpu_per_request": {2, 1}, "requests_per_s": {0.5, 1}}
	if len(f.Ratios) != 2 {
		t.Fatalf("%+v", f.Ratios)
	}
	for _, r := range f.Ratios {
		if fmt.Sprint(r.PerRound) != fmt.Sprint(want[r.Figure]) || r.Median != 1.5 && r.Figure == "cpu_per_request" ||
			r.Median != 0.75 && r.Figure == "requests_per_s" {
			t.Errorf("%+v", r)
		}
	}
	if m := f.Medians[0]; m.Proxy != "sextant" || m.RequestsPS != 100 || m.CPUUsPerReq != 15 {
		t.Errorf("%+v", m)
	}
}
