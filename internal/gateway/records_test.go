package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

func TestCallRecordsAndStatsAnswerWhatWasSent(t *testing.T) {
	fast := startUpstream(t, "fast", nil)
	slow := startUpstream(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		w.Write([]byte("upstream=slow"))
	})
	other := startUpstream(t, "other", nil)
	cp := startControlPlane(t, "")
	rr := func(c *cluster.Cluster) { c.LbPolicy = cluster.Cluster_ROUND_ROBIN }
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"},
		prefixRoute("/orders", "orders"), prefixRoute("/other", "other"), prefixRoute("/empty", "empty"))),
		edsCluster("orders", rr), edsCluster("other"), edsCluster("empty"),
		assignment("orders", ep{u: fast}, ep{u: slow}), assignment("other", ep{u: other}), assignment("empty"))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/other", "upstream=other")
	g.waitEndpoints(t, 3)
	from := time.Now()
	const n = 40
	for range n {
		if code, _, _ := g.get(t, "/orders"); code != 200 {
			t.Fatalf("orders: %d", code)
		}
	}
	for range 7 {
		g.get(t, "/other")
	}
	for range 3 {
		g.get(t, "/empty")
	}
	to := time.Now()

	var calls struct {
		Calls []struct {
			Endpoint  string `json:"endpoint"`
			Status    int    `json:"status"`
			LatencyUs int64  `json:"latency_us"`
			Cluster   string `json:"cluster"`
			Reason    string `json:"reason"`
			BytesOut  int    `json:"bytes_out"`
			Layout    int    `json:"layout"`
			Method    string `json:"method"`
			Path      string `json:"path"`
			Host      string `json:"host"`
			Port      int    `json:"port"`
			PeerIP    string `json:"peer_ip"`
			TLS       bool   `json:"tls"`
			Principal string `json:"principal"`
		} `json:"calls"`
	}
	q := func(path string, params url.Values, out any) {
		t.Helper()
		resp, err := http.Get(g.admin + path + "?" + params.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	window := url.Values{"from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}}
	p := func(kv ...string) url.Values {
		v := url.Values{}
		for k, vs := range window {
			v[k] = vs
		}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	q("/v1/calls", p("service", "orders"), &calls)
	if len(calls.Calls) != n {
		t.Fatalf("orders: %d records, want %d", len(calls.Calls), n)
	}
	perEP := map[string]int{}
	// The latency filters are held to the records' own latencies: a
	// loaded machine makes some fast calls slower than 25 ms, never a
	// slow one faster than its upstream's 30 ms sleep.
	atLeast25, atMost25 := 0, 0
	for _, c := range calls.Calls {
		perEP[c.Endpoint]++
		if c.Status != 200 || c.Cluster != "orders" || c.BytesOut == 0 {
			t.Fatalf("record %+v", c)
		}
		// What a dry run replays: the request as the client sent it, and
		// its connection (plaintext, no principal).
		gwURL, _ := url.Parse(g.url)
		if c.Layout < 2 || c.Method != "GET" || c.Path != "/orders" || c.Host != gwURL.Host || strconv.Itoa(c.Port) != gwURL.Port() ||
			c.PeerIP != "127.0.0.1" || c.TLS || c.Principal != "" {
			t.Fatalf("record's request %+v, gateway at %s", c, g.url)
		}
		if c.Endpoint == slow.addr && c.LatencyUs < 30000 {
			t.Fatalf("a slow call recorded %d us, under its upstream's 30 ms", c.LatencyUs)
		}
		if c.LatencyUs >= 25000 {
			atLeast25++
		}
		if c.LatencyUs <= 25000 {
			atMost25++
		}
	}
	if perEP[fast.addr] != n/2 || perEP[slow.addr] != n/2 {
		t.Fatalf("per endpoint: %v", perEP)
	}
	q("/v1/calls", p("service", "orders", "endpoint", slow.addr), &calls)
	if len(calls.Calls) != n/2 {
		t.Fatalf("endpoint filter: %d", len(calls.Calls))
	}
	q("/v1/calls", p("service", "orders", "min_latency", "25ms"), &calls)
	if len(calls.Calls) != atLeast25 || atLeast25 < n/2 {
		t.Fatalf("min_latency 25ms: %d records, want the %d of at least 25 ms (the %d slow ones among them)", len(calls.Calls), atLeast25, n/2)
	}
	q("/v1/calls", p("service", "orders", "max_latency", "25ms"), &calls)
	if len(calls.Calls) != atMost25 {
		t.Fatalf("max_latency 25ms: %d records, want the %d of at most 25 ms", len(calls.Calls), atMost25)
	}
	q("/v1/calls", p("service", "empty"), &calls)
	if len(calls.Calls) != 3 || calls.Calls[0].Status != 503 || calls.Calls[0].Reason != "no_healthy_endpoint" {
		t.Fatalf("empty: %+v", calls.Calls)
	}

	var stats struct {
		Count  int64 `json:"count"`
		Errors int64 `json:"errors"`
		Steps  []struct {
			Count  int64   `json:"count"`
			Errors int64   `json:"errors"`
			P99Ms  float64 `json:"p99_ms"`
		} `json:"steps"`
	}
	q("/v1/calls/stats", p("service", "orders", "step", "1h", "to", to.Add(time.Millisecond).Format(time.RFC3339Nano)), &stats)
	if stats.Count != n || stats.Errors != 0 || len(stats.Steps) != 1 || stats.Steps[0].P99Ms < 25 {
		t.Fatalf("orders stats: %+v", stats)
	}
	q("/v1/calls/stats", p("service", "empty", "step", "1h", "to", to.Add(time.Millisecond).Format(time.RFC3339Nano)), &stats)
	if stats.Count != 3 || stats.Errors != 3 {
		t.Fatalf("empty stats: %+v", stats)
	}
	q("/v1/calls/stats", p("service", "other", "step", "1h", "to", to.Add(time.Millisecond).Format(time.RFC3339Nano)), &stats)
	if stats.Count != 7 {
		t.Fatalf("other stats: %+v", stats)
	}
	resp, err := http.Get(g.admin + "/v1/calls?service=orders&from=yesterday")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("bad from: %d", resp.StatusCode)
	}
	resp, err = http.Get(g.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sextant_gateway_requests_total{class="2xx",cluster="orders"} 40`,
		`sextant_gateway_endpoint_requests_total{class="2xx",cluster="orders",endpoint="` + slow.addr + `"} 20`,
		`sextant_gateway_requests_total{class="5xx",cluster="empty"} 3`,
		`sextant_gateway_requests_total{class="4xx",cluster="orders"} 0`,
		`sextant_gateway_request_duration_seconds_count{cluster="orders"} 40`,
		// The slow endpoint's 20 took at least its 30 ms sleep.
		`sextant_gateway_endpoint_request_duration_seconds_bucket{cluster="orders",endpoint="` + slow.addr + `",le="0.025"} 0`,
		`sextant_gateway_endpoint_request_duration_seconds_bucket{cluster="orders",endpoint="` + slow.addr + `",le="10"} 20`,
		`sextant_gateway_call_records_dropped_total 0`,
		`sextant_gateway_config_info{type="Cluster",version="1"} 1`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var sum float64
	if _, err := fmt.Sscan(metricLine(string(text), `sextant_gateway_endpoint_request_duration_seconds_sum{cluster="orders",endpoint="`+slow.addr+`"}`), &sum); err != nil || sum < 20*0.03 || sum > 20*5 {
		t.Errorf("the slow endpoint's latency sum: %v (%v), want 20 calls of 30 ms or more", sum, err)
	}
}

// metricLine is the value of the exposition's line that starts with
// series ("" if none).
func metricLine(text, series string) string {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
