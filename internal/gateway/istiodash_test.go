package gateway_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/debian"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

// istioModule is the istio.io/istio version whose dashboards the test
// reads (manifests/addons/dashboards), from the module cache: go mod
// download -json istio.io/istio@<this> fetches it.
const istioModule = "istio.io/istio@v0.0.0-20260827124520-eed52ebb66ad"

// istioDashboardExprs returns the PromQL expressions of one of Istio's
// dashboards, each once.
func istioDashboardExprs(t *testing.T, file string) []string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", istioModule).Output()
	if err != nil {
		t.Fatalf("go mod download %s (the module proxy or the module cache is needed): %v", istioModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: %s", istioModule, out)
	}
	b, err := os.ReadFile(filepath.Join(mod.Dir, "manifests", "addons", "dashboards", file))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var exprs []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok && !slices.Contains(exprs, e) {
				exprs = append(exprs, e)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	if len(exprs) < 20 {
		t.Fatalf("%s: only %d expressions", file, len(exprs))
	}
	return exprs
}

// grafanaVars substitutes a dashboard's variables as Grafana does, the
// longest names first ($srcwl before $srcns is no matter, $__rate_interval
// before $__interval is).
func grafanaVars(expr string, vars map[string]string) string {
	names := make([]string, 0, len(vars))
	for n := range vars {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	for _, n := range names {
		expr = strings.ReplaceAll(expr, "$"+n, vars[n])
	}
	return expr
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	Values [][2]any          `json:"values"`
}

func sampleValue(v [2]any) float64 {
	s, _ := v[1].(string)
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// TestIstioDashboardsOnPrometheus: Debian's Prometheus scrapes a real
// gateway carrying known traffic to shop/orders (200s slowed to 30 ms,
// fast 503s), from a caller with a SPIFFE client certificate
// (web/frontend, mutual_tls) and one without (unknown). Every PromQL
// expression of Istio's service and workload dashboards, with Grafana's
// variables filled in, returns series, but those the test lists with why;
// the request rate, the success (non-5xx) rate and p50/p99 are what the
// traffic implies.
func TestIstioDashboardsOnPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real gateway and a real Prometheus")
	}
	if _, err := debian.Ensure("/usr/bin/prometheus", "--no-install-recommends", "prometheus"); err != nil {
		t.Fatalf("Prometheus is needed (apt-get install prometheus, or run the test as root to have it installed): %v", err)
	}
	serviceExprs := istioDashboardExprs(t, "istio-service-dashboard.json")
	workloadExprs := istioDashboardExprs(t, "istio-workload-dashboard.json")

	up := startUpstream(t, "orders", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/fail") {
			w.WriteHeader(503)
			w.Write([]byte("failing"))
			return
		}
		time.Sleep(30 * time.Millisecond)
		w.Write([]byte("ok"))
	})
	ca, clients := newPKI(t), newPKI(t)
	cp := startControlPlane(t, "")
	g := startGatewayOpts(t, cp.addr, true, gateway.Options{IstioMetrics: true})
	sc, sk := ca.issue(t, false, "orders.test")
	orders := edsCluster("orders", func(c *cluster.Cluster) {
		c.Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{gateway.SextantMetadataKey: {Fields: map[string]*structpb.Value{
			"service": structpb.NewStringValue("shop/orders"), "subset": structpb.NewStringValue("v1")}}}}
	})
	// orders' TLS port too, passed through unopened: Istio's TCP metrics.
	backCA := newPKI(t)
	back := startPassthroughEndpoint(t, backCA, "back", "tls.orders.test")
	ordersTLS := edsCluster("orders-tls", func(c *cluster.Cluster) {
		c.Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{gateway.SextantMetadataKey: {Fields: map[string]*structpb.Value{
			"service": structpb.NewStringValue("shop/orders"), "subset": structpb.NewStringValue("v1")}}}}
	})
	l := tlsListener("gw-tls", g.tlsPort(), tlsChain{names: []string{"orders.test"}, cert: "c", ca: "c-ca", require: false})
	l.FilterChains = append(l.FilterChains, passthroughChain("orders-tls", 0, "tls.orders.test"))
	cp.set(l, certSecret("c", sc, sk), caSecret("c-ca", clients.pem),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "orders"))), orders, assignment("orders", ep{u: up}),
		ordersTLS, assignment("orders-tls", ep{u: back}))
	// passthrough makes one TLS connection through the gateway, one
	// request on it, and closes it.
	passthrough := func() error {
		c := g.tlsClient(backCA.pool, false)
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://tls.orders.test/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("passthrough: %d", resp.StatusCode)
		}
		return nil
	}
	frontend := g.tlsClient(ca.pool, false, clients.spiffeCert(t, "spiffe://cluster.local/ns/web/sa/frontend"))
	anonymous := g.tlsClient(ca.pool, false)
	call := func(c *http.Client, path string) error {
		resp, err := c.Get("https://orders.test" + path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if want := map[bool]int{true: 503, false: 200}[strings.HasSuffix(path, "/fail")]; resp.StatusCode != want {
			return fmt.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
		return nil
	}
	waitFor(t, "the gateway to serve orders over TLS", func() bool { return call(anonymous, "/ok") == nil })
	waitFor(t, "the gateway to pass orders' TLS through", func() bool { return passthrough() == nil })
	// Every label set exists before the measured burst (irate needs a
	// sample before it): one more 200 and a 503 from each caller.
	for _, c := range []*http.Client{frontend, anonymous} {
		for _, p := range []string{"/ok", "/fail"} {
			if err := call(c, p); err != nil {
				t.Fatal(err)
			}
		}
	}

	admin, _ := url.Parse(g.admin)
	promAddr := freePromAddr(t)
	dir := t.TempDir()
	const scrape = 2 * time.Second
	cfg := fmt.Sprintf("global:\n  scrape_interval: %s\nscrape_configs:\n  - job_name: gateway\n    static_configs:\n      - targets: [%q]\n", scrape, admin.Host)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var logMu sync.Mutex
	prom := exec.Command("/usr/bin/prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--web.listen-address="+promAddr, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--log.level=warn")
	prom.Stdout, prom.Stderr = lockedWriter{&logs, &logMu}, lockedWriter{&logs, &logMu}
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		prom.Process.Kill()
		prom.Wait()
		if t.Failed() {
			logMu.Lock()
			t.Logf("prometheus output:\n%s", logs.String())
			logMu.Unlock()
		}
	})
	query := func(q string, at float64) ([]promSample, error) {
		v := url.Values{"query": {q}}
		if at > 0 {
			v.Set("time", strconv.FormatFloat(at, 'f', 3, 64))
		}
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?" + v.Encode())
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []promSample `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return nil, err
		}
		if body.Status != "success" {
			return nil, fmt.Errorf("query %s: %s", q, body.Error)
		}
		return body.Data.Result, nil
	}
	// destSeries are the destination reporter's four request series.
	const destSeries = `istio_requests_total{reporter="destination",destination_service="orders.shop.svc.cluster.local"}`
	total := func() float64 {
		r, err := query("sum("+destSeries+")", 0)
		if err != nil || len(r) != 1 {
			return -1
		}
		return sampleValue(r[0].Value)
	}
	sent := 1 + 4.0 // the wait's 200 and the four above
	deadline := time.Now().Add(90 * time.Second)
	for total() != sent {
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus never saw %v requests (sees %v)", sent, total())
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The burst: nOK 200s and nFail 503s, half from each caller, meant to
	// fall between two scrapes; checked below from the scrapes' samples,
	// and sent again (up to three times) when it did not.
	const nOK, nFail, nConns = 40, 10, 3
	var tA, tB float64
	var burstFrom, burstTo time.Time
	for round := 0; ; round++ {
		if round == 3 {
			t.Fatalf("three bursts in a row spanned a scrape")
		}
		before := sent
		// Start right after a scrape: wait for the next sample time.
		last := lastSampleTime(t, query, destSeries)
		for lastSampleTime(t, query, destSeries) == last {
			time.Sleep(50 * time.Millisecond)
		}
		burstFrom = time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, nOK+nFail+nConns)
		for i := range nOK + nFail {
			c := frontend
			if i%2 == 1 {
				c = anonymous
			}
			p := "/ok"
			if i >= nOK {
				p = "/fail"
			}
			wg.Add(1)
			go func() { defer wg.Done(); errs <- call(c, p) }()
		}
		for range nConns {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- passthrough() }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		burstTo = time.Now()
		sent += nOK + nFail
		for total() != sent {
			if time.Now().After(deadline.Add(time.Minute)) {
				t.Fatalf("Prometheus never saw %v requests (sees %v)", sent, total())
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The samples of the total: the burst fits between two scrapes
		// when the one before the first at sent is at before.
		raw, err := query(destSeries+"[1m]", 0)
		if err != nil || len(raw) != 4 {
			t.Fatalf("raw samples: %d series, %v", len(raw), err)
		}
		tA, tB = burstSamples(raw, before, sent)
		if tB > 0 {
			break
		}
		t.Logf("burst %d spanned a scrape; again", round+1)
	}
	dt := tB - tA

	// Grafana's values: $__rate_interval is max($__interval + scrape
	// interval, 4 x scrape interval); multi-value variables at All match
	// every value (.*); qrep as the dashboards keep it (destination).
	svcVars := map[string]string{"service": "orders.shop.svc.cluster.local", "qrep": "destination",
		"srcns": ".*", "srcwl": ".*", "dstns": ".*", "dstwl": ".*", "srccluster": ".*", "dstcluster": ".*",
		"__rate_interval": (4 * scrape).String(), "__interval": scrape.String()}
	wlVars := func(ns, wl string) map[string]string {
		return map[string]string{"namespace": ns, "workload": wl, "qrep": "destination", "srcns": ".*", "srcwl": ".*", "dstsvc": ".*",
			"__rate_interval": (4 * scrape).String(), "__interval": scrape.String()}
	}
	// Queries that cannot return series, and why.
	why := func(e string) string {
		switch {
		case strings.Contains(e, "istio_tcp_") && strings.Contains(e, `source_workload=~"$workload"`):
			return "TCP is TLS passthrough, whose caller the gateway cannot know: source_workload unknown"
		case strings.Contains(e, "istio_tcp_") && strings.Contains(e, `connection_security_policy="mutual_tls"`):
			return "TLS passthrough is the endpoint's own TLS, not mutual_tls"
		case strings.Contains(e, `destination_principal=~"spiffe.*"`):
			return "the gateway does not know the destination's identity: destination_principal is unknown"
		case strings.Contains(e, `reporter="source"`) && strings.Contains(e, `connection_security_policy="mutual_tls"`):
			return "Istio's source reporter writes connection_security_policy unknown: empty in Istio too"
		}
		return ""
	}
	checked, excluded := 0, map[string]int{}
	run := func(dash, e string, varsets ...map[string]string) {
		var got int
		var qs []string
		for _, vars := range varsets {
			q := grafanaVars(e, vars)
			qs = append(qs, q)
			if strings.Contains(q, "$") {
				t.Errorf("%s: a variable left in %s", dash, q)
			}
			r, err := query(q, tB)
			if err != nil {
				t.Errorf("%s: %v", dash, err)
				return
			}
			got += len(r)
		}
		checked++
		if reason := why(e); reason != "" {
			excluded[reason]++
			if got != 0 {
				t.Errorf("%s: %s returns %d series, but the test says it cannot (%s)", dash, qs[0], got, reason)
			}
			return
		}
		if got == 0 {
			t.Errorf("%s: no series for %s", dash, strings.Join(qs, " | "))
		}
	}
	for _, e := range serviceExprs {
		run("service dashboard", e, svcVars)
	}
	// The workload dashboard of orders (its inbound panels) and of
	// web/frontend (its outbound ones: the caller with an identity).
	for _, e := range workloadExprs {
		run("workload dashboard", e, wlVars("shop", "orders"), wlVars("web", "frontend"))
	}

	t.Logf("%d expressions of Istio's service and workload dashboards checked; without series, as expected: %v", checked, excluded)

	// The values. Rates: the burst over the two scrapes around it.
	one := func(q string) float64 {
		t.Helper()
		r, err := query(q, tB)
		if err != nil || len(r) != 1 {
			t.Fatalf("%s: %d series, %v", q, len(r), err)
		}
		return sampleValue(r[0].Value)
	}
	rate := one(grafanaVars(`round(sum(irate(istio_requests_total{reporter=~"$qrep",destination_service="$service"}[$__rate_interval])), 0.001)`, svcVars))
	if want := float64(nOK+nFail) / dt; math.Abs(rate-want) > 0.002 {
		t.Errorf("request rate %v, want %v (%d calls in %.3f s)", rate, want, nOK+nFail, dt)
	}
	t.Logf("request rate %v/s (%d calls between scrapes %.3f s apart)", rate, nOK+nFail, dt)
	success := one(grafanaVars(`sum(irate(istio_requests_total{reporter=~"$qrep",destination_service="$service",response_code!~"5.*"}[$__rate_interval])) / (sum(irate(istio_requests_total{reporter=~"$qrep",destination_service="$service"}[$__rate_interval])) or on () vector(1))`, svcVars))
	if want := float64(nOK) / float64(nOK+nFail); math.Abs(success-want) > 1e-9 {
		t.Errorf("success rate %v, want %v", success, want)
	}
	mtlsRate := one(grafanaVars(`round(sum(irate(istio_requests_total{connection_security_policy="mutual_tls",destination_service="$service",reporter=~"$qrep",source_workload=~"$srcwl",source_workload_namespace=~"$srcns"}[$__rate_interval])) by (source_workload, source_workload_namespace), 0.001)`, svcVars))
	if want := float64(nOK+nFail) / 2 / dt; math.Abs(mtlsRate-want) > 0.002 {
		t.Errorf("mutual_tls request rate %v, want %v", mtlsRate, want)
	}
	// TCP: the passthrough connections, opened and closed, with bytes
	// both ways.
	for _, name := range []string{"istio_tcp_connections_opened_total", "istio_tcp_connections_closed_total"} {
		if got := one(`sum(` + name + `{reporter="destination",destination_service="orders.shop.svc.cluster.local",request_protocol="tcp"})`); got < 1+nConns {
			t.Errorf("%s %v, want at least %d", name, got, 1+nConns)
		}
	}
	for _, dir := range []string{"sent", "received"} {
		q := grafanaVars(`sum(irate(istio_tcp_`+dir+`_bytes_total{reporter=~"$qrep", destination_service="$service"}[$__rate_interval]))`, svcVars)
		if got := one(q); got <= 0 {
			t.Errorf("%s: %v, want bytes moving in the burst", q, got)
		}
	}

	// Quantiles: within the bucket of the burst's own latencies (the
	// gateway's call records) that holds the quantile's rank.
	var calls struct {
		Calls []struct {
			LatencyUs int64 `json:"latency_us"`
		} `json:"calls"`
	}
	g.adminJSON(t, "/v1/calls?"+url.Values{"service": {"shop/orders"}, "from": {burstFrom.Add(-time.Millisecond).Format(time.RFC3339Nano)},
		"to": {burstTo.Add(time.Millisecond).Format(time.RFC3339Nano)}}.Encode(), &calls)
	if len(calls.Calls) != nOK+nFail {
		t.Fatalf("the call log has %d calls of the burst, want %d", len(calls.Calls), nOK+nFail)
	}
	lat := make([]float64, len(calls.Calls))
	for i, c := range calls.Calls {
		lat[i] = float64(c.LatencyUs) / 1000
	}
	slices.Sort(lat)
	bounds := []float64{0, 0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}
	for _, q := range []float64{0.5, 0.99} {
		got := one(grafanaVars(fmt.Sprintf(`(histogram_quantile(%.2f, sum(irate(istio_request_duration_milliseconds_bucket{reporter=~"$qrep",destination_service="$service"}[$__rate_interval])) by (le)) / 1000) or histogram_quantile(%.2f, sum(irate(istio_request_duration_seconds_bucket{reporter=~"$qrep",destination_service="$service"}[$__rate_interval])) by (le))`, q, q), svcVars)) * 1000
		x := lat[int(math.Ceil(q*float64(len(lat))))-1]
		i, _ := slices.BinarySearch(bounds, x) // bounds[i-1] < x <= bounds[i]
		t.Logf("p%v: %.3f ms from the histogram; the burst's latency at that rank %.3f ms", q*100, got, x)
		if i == 0 || i == len(bounds) || got < bounds[i-1] || got > bounds[i] {
			t.Errorf("p%v %.3f ms: the burst's latency at that rank is %.3f ms, in bucket (%v, %v]", q*100, got, x, bounds[max(i-1, 0)], bounds[min(i, len(bounds)-1)])
		}
	}
	if p50 := one(grafanaVars(`(histogram_quantile(0.50, sum(irate(istio_request_duration_milliseconds_bucket{reporter=~"$qrep",destination_service="$service"}[$__rate_interval])) by (le)) / 1000)`, svcVars)); p50 < 0.025 {
		t.Errorf("p50 %v s: the 200s (80%% of calls) take 30 ms or more", p50)
	}
}

// lastSampleTime is the time of destSeries' newest scrape, or 0.
func lastSampleTime(t *testing.T, query func(string, float64) ([]promSample, error), series string) float64 {
	r, err := query("max(timestamp("+series+"))", 0)
	if err != nil || len(r) != 1 {
		return 0
	}
	return sampleValue(r[0].Value)
}

// burstSamples finds the scrape tB where the series' total first reached
// after, and the scrape tA before it; both 0 unless the total was before
// at tA (the burst fell between them).
func burstSamples(raw []promSample, before, after float64) (tA, tB float64) {
	totals := map[float64]float64{}
	for _, s := range raw {
		for _, v := range s.Values {
			ts, _ := v[0].(float64)
			totals[ts] += sampleValue(v)
		}
	}
	times := make([]float64, 0, len(totals))
	for ts := range totals {
		times = append(times, ts)
	}
	slices.Sort(times)
	for i, ts := range times {
		if totals[ts] == after {
			if i > 0 && totals[times[i-1]] == before {
				return times[i-1], ts
			}
			return 0, 0
		}
	}
	return 0, 0
}

func freePromAddr(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
