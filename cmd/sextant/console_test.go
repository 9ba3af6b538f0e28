package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/console/browsertest"
	"github.com/sextant-mesh/sextant/internal/secret/secrettest"
)

// consoleStack is the server and a gateway that registers itself in it, as
// the binary runs them, plus two upstreams behind the gateway.
type consoleStack struct {
	api         *client.Client
	base        string // http://server
	proxy       string
	admin       string
	tls         string // the gateway's --tls-listen
	up1, up2    *upstream
	failing     *upstream // the only instance of default/stock: every call fails
	gatewayNode string
}

// consoleTraceUI is the console stack's gateway's --tracing-ui-url.
const consoleTraceUI = "http://jaeger.example:16686/trace/{trace_id}"

func startConsoleStack(t *testing.T) *consoleStack {
	t.Helper()
	httpAddr, xdsAddr, proxy, admin, tlsAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	serverDone, gatewayDone := make(chan error, 1), make(chan error, 1)
	data := t.TempDir() // here: its removal must come after the server's stop below
	go func() {
		serverDone <- runServer(ctx, serverFlags{data: data, http: httpAddr, xds: xdsAddr, logFormat: "text",
			logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second})
	}()
	s := &consoleStack{base: "http://" + httpAddr, proxy: proxy, admin: admin, tls: tlsAddr, gatewayNode: "console-test-gateway"}
	// Generous: under -race on a loaded 2-core machine the start alone
	// has taken more than 10 s.
	waitTrue(t, 60*time.Second, func() bool {
		resp, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// Every call traced to a collector that takes and drops the spans (a
	// real Jaeger is TestTracingJaeger's): the call records keep trace
	// ids, which the Calls page links to --tracing-ui-url.
	spans := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	t.Cleanup(spans.Close)
	gctx, gcancel := context.WithCancel(context.Background())
	go func() {
		gatewayDone <- runGateway(gctx, gatewayFlags{xds: xdsAddr, listen: proxy, admin: admin,
			data: filepath.Join(t.TempDir(), "gw"), node: s.gatewayNode, registry: s.base, service: "sextant-gateway",
			tlsListen: []string{tlsAddr}, maxBody: 1 << 20, retainAge: time.Hour, retainBytes: 1 << 30, drain: 5 * time.Second,
			logFormat: "text", logLevel: "error",
			tracingFlags: tracingFlags{tracingEndpoint: spans.URL, tracingProtocol: "http", tracingSampling: 100,
				tracingService: "sextant-gateway", tracingUI: consoleTraceUI}})
	}()
	t.Cleanup(func() {
		gcancel()
		if err := <-gatewayDone; err != nil {
			t.Errorf("gateway: %v", err)
		}
		cancel()
		if err := <-serverDone; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	var err error
	if s.api, err = client.New(s.base); err != nil {
		t.Fatal(err)
	}
	s.up1, s.up2, s.failing = startUpstream(t, "orders-a"), startUpstream(t, "orders-b"), startUpstream(t, "stock-a")
	s.failing.fail.Store(true)
	c := context.Background()
	if _, err := s.api.Register(c,
		client.Instance{ID: "orders-a", Service: "orders", Host: "127.0.0.1", Port: s.up1.addr.Port, Version: "v1",
			Metadata: map[string]string{"version": "v1", "zone": "z1"}},
		client.Instance{ID: "orders-b", Service: "orders", Host: "127.0.0.1", Port: s.up2.addr.Port, Version: "v2",
			Metadata: map[string]string{"version": "v2", "zone": "z2"}},
		// Never heartbeats: unhealthy after 3 s, for "needs attention".
		client.Instance{ID: "orders-stale", Service: "orders", Host: "127.0.0.1", Port: 9, Version: "v3", TTLSeconds: 1,
			Metadata: map[string]string{"version": "v3", "zone": "z1"}},
		client.Instance{ID: "stock-a", Service: "stock", Host: "127.0.0.1", Port: s.failing.addr.Port, Version: "v1"},
		client.Instance{ID: "payments-a", Namespace: "billing", Service: "payments", Host: "127.0.0.1", Port: 9, Version: "v1",
			Metadata: map[string]string{"version": "v1"}},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := s.api.ApplyConfig(c, []byte(meshConfig), false); err != nil {
		t.Fatal(err)
	}
	// The gateway listens once it has started, maybe after this point; a
	// call before that is refused (and get fails the test).
	waitTrue(t, 15*time.Second, func() bool {
		c, err := net.Dial("tcp", proxy)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	// Config through the gateway: the header match reaches v2.
	waitTrue(t, 15*time.Second, func() bool { return tally(t, proxy, 2, map[string]string{"x-canary": "yes"})["orders-b"] == 2 })
	return s
}

func (s *consoleStack) calls(t *testing.T, n int) {
	for i := range n {
		h := map[string]string(nil)
		if i%5 == 0 {
			h = map[string]string{"x-canary": "yes"}
		}
		if body, code := get(t, s.proxy, "orders", "/", h); code != http.StatusOK {
			t.Fatalf("call %d: status %d: %s", i, code, body)
		}
	}
}

// failingCalls sends n calls to default/stock, whose one endpoint answers
// 503 to every call.
func (s *consoleStack) failingCalls(t *testing.T, n int) {
	for i := range n {
		if body, code := get(t, s.proxy, "stock", "/", nil); code < 500 {
			t.Fatalf("stock call %d: status %d: %s", i, code, body)
		}
	}
}

func (s *consoleStack) instance(t *testing.T, id string) client.Instance {
	t.Helper()
	in, err := s.api.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// The console against the real server: every page loads without errors,
// shows what the API holds, and acts through it. Screenshots go to
// $SEXTANT_CONSOLE_SCREENSHOTS (make screenshots).
func TestConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("browser: the console against the real server and a gateway")
	}
	s := startConsoleStack(t)
	s.calls(t, 60)
	s.failingCalls(t, 30)
	b := browsertest.Start(t)
	ui := s.base + "/ui/"
	t.Run("overview", func(t *testing.T) {
		b.Navigate(t, s.base+"/") // redirects to /ui/
		b.WaitTrue(t, 15*time.Second, "overview", `location.pathname === '/ui/' && document.querySelector('#attention')
			&& document.querySelector('#attention').textContent.includes('orders-stale')
			&& [...document.querySelectorAll('.stat')].some(e => e.textContent.includes('gateways') && e.querySelector('.stat-value').textContent === '1')
			&& [...document.querySelectorAll('.stat')].some(e => e.textContent.includes('push subscribers') && e.querySelector('.stat-value').textContent === '1')`)
		text := browsertest.Eval[string](t, b, `document.querySelector('main').innerText`)
		for _, want := range []string{"namespaces", "unhealthy", "isolated", "revision"} {
			if !strings.Contains(text, want) {
				t.Errorf("overview lacks %q:\n%s", want, text)
			}
		}
		// Counts read as words: "1 cluster, 2 endpoint sets", never "1 clusters,2 endpoint sets".
		if line := browsertest.Eval[string](t, b, `document.querySelector('#engine-line').textContent`); !regexp.MustCompile(
			`: (1 cluster|\d+ clusters), (1 endpoint set|\d+ endpoint sets), (1 route configuration|\d+ route configurations);`).MatchString(line) {
			t.Errorf("engine line: %q", line)
		}
		// The failing service is flagged, with the threshold said: at its
		// endpoint, or at calls with none picked if the gateway ejected it.
		b.WaitTrue(t, 15*time.Second, "high error rate flagged", `[...document.querySelectorAll('#attention li.high-errors')].some(li =>
			li.textContent.includes('default/stock') && li.textContent.includes('100% errors'))`)
		if th := browsertest.Eval[string](t, b, `document.querySelector('#error-threshold').textContent`); !strings.Contains(th, "5% errors or more") {
			t.Errorf("the threshold is not said: %q", th)
		}
		// At a glance: calls/s, error rate and p99 per service, push
		// latency, instances by health.
		b.WaitTrue(t, 15*time.Second, "charts", `['#glance-rps', '#glance-errors', '#glance-p99'].every(id =>
			document.querySelector(id + ' canvas') && Number(document.querySelector(id + ' .chart-box').dataset.points) > 0)
			&& Number((document.querySelector('#glance-push .chart-box') || {dataset: {}}).dataset.points) >= 2
			&& document.querySelector('#glance-health .health-line[data-service="default/stock"]')
			&& [...document.querySelectorAll('#glance-rps .u-legend .u-series')].some(e => e.textContent.includes('default/orders'))
			&& [...document.querySelectorAll('#glance-errors .u-legend .u-series')].some(e => e.textContent.includes('default/stock'))`)
		b.Layout(t, "overview.png")
		b.NoProblems(t, "overview")
	})

	t.Run("services", func(t *testing.T) {
		b.Navigate(t, ui+"#/services")
		b.WaitTrue(t, 10*time.Second, "list", `document.querySelector('[data-service="default/orders"]') && document.querySelector('[data-service="billing/payments"]')`)
		b.SetInput(t, "#service-search", "pay")
		b.WaitTrue(t, 5*time.Second, "search", `document.querySelectorAll('.services .vrow').length === 1 && document.querySelector('[data-service="billing/payments"]')`)
		b.SetInput(t, "#service-search", "")
		b.WaitTrue(t, 5*time.Second, "search cleared", `document.querySelectorAll('.services .vrow').length >= 3`)
		b.Layout(t, "services.png")
		b.NoProblems(t, "services")
	})

	t.Run("service live, selector, actions", func(t *testing.T) {
		b.Navigate(t, ui+"#/services/default/orders")
		b.WaitTrue(t, 10*time.Second, "instances", `document.querySelectorAll('.instances [data-id]').length === 3`)
		b.WaitTrue(t, 10*time.Second, "subsets", `document.querySelector('#subsets tr[data-subset="v1"]') && document.querySelector('#subsets tr[data-subset="v2"]')`)
		if got := browsertest.Eval[string](t, b, `document.querySelector('#subsets tr[data-subset="v2"]').children[3].textContent`); got != "1" {
			t.Errorf("subset v2 counts %s instances, want 1", got)
		}
		// Registered through the API: on the page without a reload.
		before := browsertest.Eval[float64](t, b, `performance.getEntriesByType('navigation').length`)
		if _, err := s.api.Register(context.Background(), client.Instance{ID: "orders-live", Service: "orders", Host: "127.0.0.1",
			Port: s.up2.addr.Port, Version: "v2", Metadata: map[string]string{"version": "v2", "zone": "z3"},
			Checks: []client.Check{{ID: "beat", Type: "ttl", TTL: client.Duration(time.Hour), Status: "passing"}}}); err != nil {
			t.Fatal(err)
		}
		b.WaitTrue(t, 5*time.Second, "live instance", `document.querySelector('.instances [data-id="orders-live"]')`)
		if after := browsertest.Eval[float64](t, b, `performance.getEntriesByType('navigation').length`); after != before {
			t.Error("the page reloaded")
		}
		// The selector filters as it is typed, on the server.
		b.SetInput(t, "#selector-input", "version=v2")
		b.WaitTrue(t, 5*time.Second, "filtered", `[...document.querySelectorAll('.instances [data-id]')].map(e => e.dataset.id).join() === 'orders-b,orders-live'`)
		b.SetInput(t, "#selector-input", "zone in (z1,z3),version!=v3")
		b.WaitTrue(t, 5*time.Second, "set-based", `[...document.querySelectorAll('.instances [data-id]')].map(e => e.dataset.id).join() === 'orders-a,orders-live'`)
		b.NoProblems(t, "selector")
		// A bad one shows the server's parser error under the box.
		b.SetInput(t, "#selector-input", "zone in (z1")
		b.WaitTrue(t, 5*time.Second, "selector error", `document.querySelector('#selector-error').textContent.length > 0`)
		msg := browsertest.Eval[string](t, b, `document.querySelector('#selector-error').textContent`)
		if !strings.Contains(msg, "selector") && !strings.Contains(msg, ")") {
			t.Errorf("selector error %q names nothing", msg)
		}
		b.NoProblems(t, "bad selector", "/instances?selector=") // the 400 the test asked for
		b.SetInput(t, "#selector-input", "version=v2")
		b.WaitTrue(t, 5*time.Second, "error cleared", `document.querySelector('#selector-error').textContent === '' && document.querySelectorAll('.instances [data-id]').length === 2`)

		// Isolate, then weight 0, through the page; the API shows it.
		b.Click(t, `.instances [data-id="orders-live"]`)
		b.WaitTrue(t, 5*time.Second, "record", `document.querySelector('#instance-panel') && document.querySelector('#instance-panel').textContent.includes('orders-live')`)
		// Its checks, with their status and last output.
		if _, err := s.api.SetCheck(context.Background(), "orders-live", "beat", "warning", "queue depth 40"); err != nil {
			t.Fatal(err)
		}
		b.WaitTrue(t, 10*time.Second, "check", `(e => e && e.querySelector('.badge').textContent === 'warning' && e.textContent.includes('queue depth 40'))(document.querySelector('#instance-checks [data-check="beat"]'))`)
		b.Click(t, "#act-isolate")
		b.Click(t, "#confirm-ok")
		b.WaitTrue(t, 5*time.Second, "isolated", `document.querySelector('.instances [data-id="orders-live"] .badge').textContent === 'isolated'`)
		if in := s.instance(t, "orders-live"); !in.Isolated || in.Metadata["zone"] != "z3" {
			t.Errorf("after isolate: %+v", in)
		}
		b.Click(t, "#act-weight")
		b.Click(t, "#confirm-ok")
		b.WaitTrue(t, 5*time.Second, "weight", `document.querySelector('.instances [data-id="orders-live"]').children[4].textContent === '0'`)
		if in := s.instance(t, "orders-live"); in.Weight == nil || *in.Weight != 0 || !in.Isolated {
			t.Errorf("after weight 0: %+v", in)
		}
		b.Click(t, "#act-metadata")
		b.SetInput(t, "#metadata-input", "version=v2\nzone=z4\nowner=team-a")
		b.Click(t, "#metadata-ok")
		b.Click(t, "#confirm-ok")
		b.WaitTrue(t, 5*time.Second, "metadata", `document.querySelector('#instance-panel').textContent.includes('owner=team-a')`)
		if in := s.instance(t, "orders-live"); in.Metadata["owner"] != "team-a" || in.Metadata["zone"] != "z4" {
			t.Errorf("after metadata: %+v", in.Metadata)
		}
		// The page's re-registers keep the check and its state.
		if in := s.instance(t, "orders-live"); len(in.Checks) != 1 || in.Checks[0].Status != "warning" || in.Checks[0].Output != "queue depth 40" {
			t.Errorf("after the page's edits, checks %+v", in.Checks)
		}
		// The record's dates are in the console's one format.
		if d := browsertest.Eval[string](t, b, `[...document.querySelectorAll('#instance-panel dt')].find(e => e.textContent === 'created').nextElementSibling.textContent`); !dateRE.MatchString(d) {
			t.Errorf("created %q, want YYYY-MM-DD HH:MM:SS", d)
		}
		b.Layout(t, "service.png")
		b.Click(t, "#act-deregister")
		b.Click(t, "#confirm-ok")
		b.WaitTrue(t, 5*time.Second, "deregistered", `!document.querySelector('.instances [data-id="orders-live"]')`)
		if _, err := s.api.Get(context.Background(), "orders-live"); err == nil {
			t.Error("orders-live is still registered")
		}
		// Register through the form, in a service no route sends calls to
		// (every address in these tests is on loopback).
		b.Click(t, "#register-open")
		b.SetInput(t, "#reg-service", "inventory")
		b.SetInput(t, "#reg-host", "127.0.0.1")
		b.SetInput(t, "#reg-port", "9")
		b.SetInput(t, "#reg-version", "v2")
		b.SetInput(t, "#reg-metadata", "version=v2")
		b.Click(t, "#reg-ok")
		b.Click(t, "#confirm-ok")
		b.WaitTrue(t, 5*time.Second, "registered by form", `location.hash.startsWith('#/services/default/inventory')
			&& [...document.querySelectorAll('.instances [data-id]')].some(e => e.textContent.includes('127.0.0.1:9'))`)
		b.NoProblems(t, "actions")
	})

	t.Run("routing config", func(t *testing.T) {
		b.Navigate(t, ui+"#/config/VirtualService/default/orders")
		b.WaitTrue(t, 10*time.Second, "editor", `document.querySelector('#config-editor') && document.querySelector('#config-editor').value.includes('x-canary')
			&& document.querySelector('[data-key="DestinationRule/default/orders"]')`)
		// An unsupported field: the error shows at its line.
		type edit struct {
			Text string `json:"text"`
			Line int    `json:"line"`
		}
		e := browsertest.Eval[edit](t, b, `(() => { const ls = document.querySelector('#config-editor').value.split('\n');
			const i = ls.findIndex(l => l.trim() === 'route:'); ls.splice(i, 0, ls[i].match(/^\s*/)[0] + 'delegate: {name: orders}');
			return {text: ls.join('\n'), line: i + 1}; })()`)
		b.SetInput(t, "#config-editor", e.Text)
		b.Click(t, "#config-dryrun")
		b.WaitTrue(t, 5*time.Second, "error at its line", fmt.Sprintf(`document.querySelector('#config-errors li[data-line="%d"]')
			&& document.querySelector('#config-errors').textContent.includes('delegate')
			&& document.querySelectorAll('.gutter .bad-line').length === 1 && document.querySelector('.gutter .bad-line').textContent === '%d'`, e.Line, e.Line))
		b.NoProblems(t, "invalid config", "/v1/config:apply")
		// The fix, and a change: a dry run shows the diff, then apply.
		fixed := strings.Replace(strings.Replace(e.Text, "weight: 75", "weight: 50", 1), "weight: 25", "weight: 50", 1)
		lines := strings.Split(fixed, "\n")
		lines = append(lines[:e.Line-1], lines[e.Line:]...)
		b.SetInput(t, "#config-editor", strings.Join(lines, "\n"))
		b.Click(t, "#config-dryrun")
		b.WaitTrue(t, 5*time.Second, "diff", `document.querySelector('#config-diff') && document.querySelector('#config-diff').textContent.includes('configured')
			&& [...document.querySelectorAll('#config-diff .ddel')].some(e => e.textContent.includes('weight: 75'))
			&& [...document.querySelectorAll('#config-diff .dadd')].some(e => e.textContent.includes('weight: 50'))
			&& document.querySelector('#config-diff').textContent.includes('RouteConfiguration')`)
		// A dry run pushed nothing, and says so.
		if p := browsertest.Eval[string](t, b, `document.querySelector('#config-would-push').textContent`); strings.Contains(p, "pushed:") || !strings.Contains(p, "would push") {
			t.Errorf("dry run says %q", p)
		}
		b.Layout(t, "config.png")
		b.Click(t, "#config-apply")
		b.Click(t, "#confirm-ok")
		b.WaitTrue(t, 5*time.Second, "applied", `document.querySelector('#config-applied') && document.querySelector('#config-applied').textContent.includes('configured')`)
		got := getJSON(t, s.base+"/v1/config/vs/default/orders")
		if !strings.Contains(got, `"weight":50`) || strings.Contains(got, `"weight":75`) {
			t.Errorf("stored after apply: %s", got)
		}
		b.NoProblems(t, "apply")
	})

	t.Run("push status", func(t *testing.T) {
		b.Navigate(t, ui+"#/push")
		synced := fmt.Sprintf(`(() => { const td = document.querySelector('#push-table tr[data-node="%s"] td[data-type="routes"]');
			return td && td.dataset.sent !== '' && td.dataset.sent === td.dataset.acked ? td.dataset.sent : ''; })()`, s.gatewayNode)
		b.WaitTrue(t, 10*time.Second, "synced routes", synced)
		v1 := browsertest.Eval[string](t, b, synced)
		// A config edit: the page shows the new version sent and ACKed.
		if _, err := s.api.ApplyConfig(context.Background(), []byte(meshConfig), false); err != nil {
			t.Fatal(err)
		}
		b.WaitTrue(t, 10*time.Second, "new version acked", fmt.Sprintf(`(%s) !== '' && (%s) !== %q`, synced, synced, v1))
		b.WaitTrue(t, 10*time.Second, "latency chart", `Number(document.querySelector('#push-latency-dist .chart-box').dataset.points) > 0
			&& document.querySelector('#push-latency-time .chart-box').dataset.points >= 2`)
		b.Layout(t, "push.png")
		if ticks := browsertest.Eval[string](t, b, `document.querySelector('#push-latency-dist .chart-box').dataset.xTicks || ''`); !strings.Contains(ticks, "+Inf") && !strings.Contains(ticks, "µs") {
			t.Errorf("the latency histogram's axis labels are not noted: %q", ticks)
		}
		b.NoProblems(t, "push")
	})

	t.Run("calls", func(t *testing.T) {
		s.calls(t, 40)
		// What the gateway recorded: every call the upstreams answered, and
		// any the gateway answered itself while the config was arriving.
		var logged struct {
			Calls []struct {
				Status int `json:"status"`
			} `json:"calls"`
		}
		if err := json.Unmarshal([]byte(getJSON(t, "http://"+s.admin+"/v1/calls?service=default/orders&from=0&limit=100000")), &logged); err != nil {
			t.Fatal(err)
		}
		ok := 0
		for _, c := range logged.Calls {
			if c.Status == 200 {
				ok++
			}
		}
		if answered := s.up1.calls.Load() + s.up2.calls.Load(); int64(ok) != answered {
			t.Fatalf("the gateway logged %d answered calls, the upstreams answered %d", ok, answered)
		}
		want := len(logged.Calls)
		b.Navigate(t, ui+"#/calls?window=5m")
		b.WaitTrue(t, 15*time.Second, "service row", fmt.Sprintf(`(() => { const r = document.querySelector('#calls-services tr[data-service="default/orders"]');
			return r && r.children[1].textContent === '%d'; })()`, want))
		// The charts drew the calls: series pixels on the canvas.
		b.WaitTrue(t, 10*time.Second, "charts", `document.querySelector('#calls-rps canvas') && document.querySelector('#calls-latency canvas')`)
		drawn := browsertest.Eval[float64](t, b, `(() => { const c = document.querySelector('#calls-rps canvas');
			const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
			for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - 0x25) < 40 && Math.abs(d[i+1] - 0x63) < 40 && Math.abs(d[i+2] - 0xeb) < 40 && d[i+3] > 200) n++;
			return n; })()`)
		if drawn < 20 {
			t.Errorf("the requests chart has %v pixels of its series", drawn)
		}
		total := browsertest.Eval[string](t, b, `[...document.querySelectorAll('#service-calls .stat')].find(e => e.textContent.includes('calls in the window')).querySelector('.stat-value').textContent`)
		if total != fmt.Sprint(want) {
			t.Errorf("calls in the window: %s, want %d", total, want)
		}
		b.WaitTrue(t, 5*time.Second, "slowest", fmt.Sprintf(`[...document.querySelectorAll('#calls-slowest tbody tr')].some(r => r.textContent.includes('%s') || r.textContent.includes('%s'))`,
			s.up1.addr.String(), s.up2.addr.String()))
		if d := browsertest.Eval[string](t, b, `document.querySelector('#calls-slowest tbody tr').children[1].textContent`); !dateRE.MatchString(d) {
			t.Errorf("slowest call started %q, want YYYY-MM-DD HH:MM:SS", d)
		}
		// Each call links to its trace in the viewer the gateway names.
		href := browsertest.Eval[string](t, b, `(document.querySelector('#calls-slowest tbody tr a.trace-link') || {}).href || ''`)
		if !regexp.MustCompile(`^http://jaeger\.example:16686/trace/[0-9a-f]{32}$`).MatchString(href) {
			t.Errorf("slowest call's trace link %q, want %s with a trace id", href, consoleTraceUI)
		}
		// The chart's time axis: the same format's time part, on one line.
		ticks := browsertest.Eval[string](t, b, `document.querySelector('#calls-rps .chart-box').dataset.xTicks || ''`)
		for _, tick := range strings.Split(ticks, "|") {
			if !regexp.MustCompile(`^(\d\d-\d\d )?\d\d:\d\d(:\d\d)?$`).MatchString(tick) {
				t.Errorf("time axis label %q (all: %q), want HH:MM[:SS]", tick, ticks)
			}
		}
		// Per endpoint: both of orders' endpoints answered, neither flagged.
		b.WaitTrue(t, 5*time.Second, "endpoints", fmt.Sprintf(`['%s', '%s'].every(a => { const r = document.querySelector('#calls-endpoints tr[data-endpoint="' + a + '"]');
			return r && !r.classList.contains('flagged') && r.children[3].textContent === '0%%'; })`, s.up1.addr, s.up2.addr))
		// The failing service: its endpoint's error rate, flagged.
		b.Click(t, `#calls-services tr[data-service="default/stock"]`)
		b.WaitTrue(t, 10*time.Second, "failing endpoint", fmt.Sprintf(`(() => { const r = document.querySelector('#calls-endpoints tr[data-endpoint="%s"]');
			return r && r.children[3].textContent.startsWith('100%%') && r.classList.contains('flagged') === (Number(r.children[1].textContent) >= 10); })()`, s.failing.addr))
		b.WaitTrue(t, 5*time.Second, "error chart drawn", `Number(document.querySelector('#calls-errors .chart-box').dataset.yMax) > 0`)
		if top := browsertest.Eval[float64](t, b, `Number(document.querySelector('#calls-errors .chart-box').dataset.yMax)`); top > 100 {
			t.Errorf("the error rate's axis goes up to %v%%", top)
		}
		b.Layout(t, "calls.png")
		b.NoProblems(t, "calls")
	})

	t.Run("service links", func(t *testing.T) {
		b.Navigate(t, ui+"#/services/default/orders")
		b.WaitTrue(t, 10*time.Second, "links", `document.querySelector('#service-links a[href="#/config/VirtualService/default/orders"]')
			&& document.querySelector('#service-links a[href="#/config/DestinationRule/default/orders"]')`)
		b.Click(t, "#service-calls-link")
		b.WaitTrue(t, 15*time.Second, "calls of the service", `location.hash.startsWith('#/calls') && document.querySelector('#calls-services tr.selected[data-service="default/orders"]')
			&& document.querySelector('#service-calls h2').textContent === 'default/orders'`)
		b.NoProblems(t, "service links")
	})

	t.Run("placement", func(t *testing.T) {
		b.Navigate(t, ui+"#/placement")
		// The server runs the scheduler: the page shows its (empty) node
		// list at a revision, never "runs no scheduler" (its own test
		// drives the page further: internal/console).
		b.WaitTrue(t, 10*time.Second, "placement page", `document.querySelector('main h1 .rev') || document.querySelector('main').textContent.includes('runs no scheduler')`)
		if browsertest.Eval[bool](t, b, `document.querySelector('main').textContent.includes('runs no scheduler') || !document.querySelector('#node-list')`) {
			t.Fatalf("the placement page found no scheduler: %s", browsertest.Eval[string](t, b, `document.querySelector('main').textContent`))
		}
		// Try a placement against the real scheduler: a node takes it, and
		// it is a dry run (nothing placed); one that fits nowhere is shown
		// as a failure.
		req, _ := http.NewRequest("PUT", s.base+"/v1/nodes/n-1", strings.NewReader(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n-1"},
			"status":{"allocatable":{"cpu":"4","memory":"8Gi","pods":"110"}}}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("put node: %d", resp.StatusCode)
		}
		b.WaitTrue(t, 10*time.Second, "node shown", `document.querySelector('#node-list [data-node="n-1"]')`)
		before := getJSON(t, s.base+"/v1/placements")
		b.Click(t, "#try-run")
		b.WaitTrue(t, 10*time.Second, "fits", `document.querySelector('#try-result.note #try-node') && document.querySelector('#try-node').textContent === 'n-1'`)
		// Nothing written: no placement, and not even a revision taken by a
		// placement deleted again.
		if after := getJSON(t, s.base+"/v1/placements"); after != before || !strings.Contains(after, `"items":[]`) {
			t.Errorf("a dry run wrote: placements %s, then %s", before, after)
		}
		b.SetInput(t, "#try-pod", "apiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: a, resources: {requests: {cpu: '64'}}}]\n")
		b.Click(t, "#try-run")
		b.WaitTrue(t, 10*time.Second, "unschedulable", `document.querySelector('#try-result.error #try-reasons') && document.querySelector('#try-reasons').textContent.includes('Insufficient cpu')`)
		b.NoProblems(t, "placement")
	})

	t.Run("identity", func(t *testing.T) {
		// A workload's certificate, signed through the SDK as the agent
		// gets one: the page shows the signing root and the certificate.
		cert, err := s.api.Certificate(context.Background(), "default", "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		b.Navigate(t, ui+"#/identity")
		b.WaitTrue(t, 10*time.Second, "roots and certificates", `document.querySelector('#trust-domain')
			&& document.querySelector('#trust-domain').textContent === 'cluster.local'
			&& document.querySelectorAll('#root-list tr[data-signing="true"]').length === 1
			&& document.querySelector('#cert-list tr[data-identity="spiffe://cluster.local/ns/default/sa/orders"]')`)
		row := browsertest.Eval[string](t, b, `document.querySelector('#cert-list tr[data-identity="spiffe://cluster.local/ns/default/sa/orders"]').innerText`)
		if !strings.Contains(row, "valid") || !strings.Contains(row, cert.Serial) {
			t.Errorf("the certificate's row %q lacks its state or serial %s", row, cert.Serial)
		}
		// The count says what it counts: a restart empties the list.
		if c := browsertest.Eval[string](t, b, `document.querySelector('#cert-count').textContent`); !regexp.MustCompile(`^\(\d+ certificates? since it started at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, newest first\)$`).MatchString(c) {
			t.Errorf("the certificates' count says %q", c)
		}
		b.Layout(t, "identity.png")
		b.NoProblems(t, "identity")
	})

	t.Run("gateways", func(t *testing.T) {
		// An Istio Gateway with two HTTPS servers (one whose certificate
		// expires in 2 days, one naming a secret that does not exist) and a
		// TLS passthrough one. The page shows them, the control plane's
		// warning, and what the running gateway serves on its TLS port.
		c := context.Background()
		certPEM, keyPEM := secrettest.Pair(t, time.Now().Add(36*time.Hour), "shop.example.com")
		if _, err := s.api.PutSecret(c, client.TLSSecret{Namespace: "default", Name: "shop-cert", Type: "tls",
			Cert: string(certPEM), Key: string(keyPEM)}, false); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(s.tls)
		gw := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %[1]s, name: https, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: SIMPLE, credentialName: shop-cert}
  - port: {number: %[1]s, name: https-admin, protocol: HTTPS}
    hosts: [admin.example.com]
    tls: {mode: SIMPLE, credentialName: admin-cert}
  - port: {number: %[1]s, name: tls-db, protocol: TLS}
    hosts: [db.example.com]
    tls: {mode: PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db}
spec:
  hosts: [db.example.com]
  gateways: [edge]
  tls:
  - match: [{sniHosts: [db.example.com]}]
    route: [{destination: {host: orders}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [edge]
  http:
  - route: [{destination: {host: orders}}]
`, port)
		if _, err := s.api.ApplyConfig(c, []byte(gw), false); err != nil {
			t.Fatal(err)
		}
		b.Navigate(t, ui+"#/gateways")
		b.WaitTrue(t, 15*time.Second, "gateway object", `document.querySelector('.gateway-object[data-gateway="default/edge"]')
			&& document.querySelectorAll('.gateway-object[data-gateway="default/edge"] .gateway-servers tbody tr').length === 3
			&& document.querySelector('.gateway-object[data-gateway="default/edge"]').textContent.includes('default/shop')
			&& document.querySelectorAll('.gateway-object[data-gateway="default/edge"] .gateway-servers td.cert .badge').length === 2`)
		servers := browsertest.Eval[string](t, b, `document.querySelector('.gateway-object[data-gateway="default/edge"] .gateway-servers').innerText`)
		for _, want := range []string{"shop-cert", "expires in 2 d", "admin-cert", "no such secret", "PASSTHROUGH"} {
			if !strings.Contains(servers, want) {
				t.Errorf("the Gateway's servers lack %q:\n%s", want, servers)
			}
		}
		b.WaitTrue(t, 15*time.Second, "warning", `document.querySelector('#gateway-warnings') && document.querySelector('#gateway-warnings').textContent.includes('"admin-cert": no such secret')`)
		// The running gateway serves the port: its chain for
		// shop.example.com with the secret's certificate, and the one for
		// admin.example.com not ready (no certificate).
		b.WaitTrue(t, 20*time.Second, "running gateway's TLS", `(() => {
			const r = document.querySelector('.gateway-running[data-node="console-test-gateway"] .tls-chains');
			if (!r) return false;
			const shop = r.querySelector('tr[data-secret="default/shop-cert"]');
			const db = [...r.querySelectorAll('tr')].find(tr => tr.textContent.includes('db.example.com'));
			return shop && shop.textContent.includes('shop.example.com') && shop.textContent.includes('expires in 2 d')
				&& r.textContent.includes('admin.example.com') && r.textContent.includes('not ready')
				&& db && db.textContent.includes('passthrough') && db.textContent.includes('default/orders');
		})()`)
		b.WaitTrue(t, 10*time.Second, "secrets", `document.querySelector('#secret-list tr[data-secret="default/shop-cert"]')`)
		b.Layout(t, "gateways.png")
		b.NoProblems(t, "gateways")
	})

	t.Run("denied calls", func(t *testing.T) {
		// An AuthorizationPolicy selecting the Gateway of the previous
		// subtest denies /admin on its TLS port: the Identity page lists
		// the denied call with the policy that denied it.
		c := context.Background()
		policy := `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules:
  - to: [{operation: {paths: ["/admin"]}}]
`
		if _, err := s.api.ApplyConfig(c, []byte(policy), false); err != nil {
			t.Fatal(err)
		}
		info, err := s.api.GetSecret(c, "default", "shop-cert")
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{ServerName: "shop.example.com", InsecureSkipVerify: true,
				// The secret's own certificate, by its fingerprint.
				VerifyConnection: func(cs tls.ConnectionState) error {
					if sum := sha256.Sum256(cs.PeerCertificates[0].Raw); hex.EncodeToString(sum[:]) != info.Fingerprint {
						return fmt.Errorf("not the secret's certificate")
					}
					return nil
				}},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, s.tls)
			}}}
		waitTrue(t, 20*time.Second, func() bool {
			resp, err := hc.Get("https://shop.example.com/admin")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusForbidden
		})
		b.Navigate(t, ui+"#/identity")
		b.WaitTrue(t, 20*time.Second, "denied call listed", `document.querySelector('#denied-calls tr[data-service="default/orders"]')
			&& document.querySelector('#denied-calls tr[data-service="default/orders"]').textContent.includes('no-admin')
			&& document.querySelector('#denied-calls tr[data-service="default/orders"]').textContent.includes('GET /admin')`)
		b.NoProblems(t, "denied calls")
	})

	t.Run("10000 instances", func(t *testing.T) {
		ins := make([]client.Instance, 10000)
		for i := range ins {
			ins[i] = client.Instance{ID: fmt.Sprintf("catalog-%05d", i), Service: "catalog", Host: "127.0.0.1",
				Port: 10000 + i, Version: "v1", Metadata: map[string]string{"shard": fmt.Sprint(i % 10), "zone": fmt.Sprintf("z%d", i%3)}}
		}
		if _, err := s.api.Register(context.Background(), ins...); err != nil {
			t.Fatal(err)
		}
		b.Navigate(t, ui+"#/services/default/catalog")
		b.Eval0(t, `window.longest = 0; new PerformanceObserver(l => { for (const e of l.getEntries()) window.longest = Math.max(window.longest, e.duration); }).observe({entryTypes: ['longtask']})`)
		b.WaitTrue(t, 20*time.Second, "10000 rendered", `document.querySelector('#instance-count').textContent.startsWith('10,000 instances') || document.querySelector('#instance-count').textContent.startsWith('10000 instances')`)
		rows := browsertest.Eval[float64](t, b, `document.querySelectorAll('.instances .vrow').length`)
		if rows < 10 || rows > 100 {
			t.Errorf("%v rows in the DOM for 10,000 instances: not virtualised", rows)
		}
		b.SetInput(t, "#selector-input", "shard=3,zone!=z0")
		b.WaitTrue(t, 20*time.Second, "filtered", `document.querySelector('#instance-count').textContent.startsWith('666 instances match')`)
		b.SetInput(t, "#selector-input", "")
		b.WaitTrue(t, 20*time.Second, "unfiltered", `document.querySelector('.instances').dataset.rows === '10000'`)
		b.Eval0(t, `document.querySelector('.instances').scrollTop = 1e9; document.querySelector('.instances').dispatchEvent(new Event('scroll'))`)
		b.WaitTrue(t, 5*time.Second, "scrolled to the end", `document.querySelector('.instances [data-id="catalog-09999"]')`)
		t.Logf("longest main-thread task while rendering and filtering 10,000 instances: %.0f ms", browsertest.Eval[float64](t, b, `window.longest`))
		b.NoProblems(t, "10000 instances")
	})
}

// dateRE is the console's one date format.
var dateRE = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`)

func getJSON(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return string(v)
}

// With ACLs on, the console asks for a token at the first 401, keeps it in
// the tab's session and sends it as a Bearer token.
func TestConsoleACL(t *testing.T) {
	if testing.Short() {
		t.Skip("browser: the console against a server with ACLs")
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	data := t.TempDir() // here: its removal must come after the server's stop below
	go func() {
		done <- runServer(ctx, serverFlags{data: data, http: addr, logFormat: "text", logLevel: "error",
			logSize: 1 << 16, drain: 5 * time.Second, acl: true, auditLog: "off"})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	base := "http://" + addr
	waitTrue(t, 10*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	resp, err := http.Post(base+"/v1/acl/bootstrap", "application/json", strings.NewReader(`{"description":"console test"}`))
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Secret string `json:"secret"`
	}
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if tok.Secret == "" {
		t.Fatalf("bootstrap: %d", resp.StatusCode)
	}

	b := browsertest.Start(t)
	b.Navigate(t, base+"/ui/")
	b.WaitTrue(t, 10*time.Second, "token prompt", `document.querySelector('#token-input')`)
	b.NoProblems(t, "prompt", "/v1/") // the 401s that asked for it
	b.SetInput(t, "#token-input", "sxt_not_a_token")
	b.Click(t, "#token-ok")
	b.WaitTrue(t, 10*time.Second, "refused token asks again", `document.querySelector('#token-input') && document.querySelector('.modal').textContent.includes('refused')`)
	b.SetInput(t, "#token-input", tok.Secret)
	b.Click(t, "#token-ok")
	b.WaitTrue(t, 10*time.Second, "overview with the token", `document.querySelector('#attention') && document.querySelector('.who').textContent.includes('console test')`)
	b.NoProblems(t, "signed in", "/v1/")
	// Kept for the tab: a reload asks nothing.
	b.Navigate(t, base+"/ui/#/services")
	b.WaitTrue(t, 10*time.Second, "services without a prompt", `!document.querySelector('#token-input') && document.querySelector('#service-search')`)
	if got := browsertest.Eval[string](t, b, `sessionStorage.getItem('sextant.token')`); got != tok.Secret {
		t.Errorf("session storage holds %q", got)
	}
	b.NoProblems(t, "reload")
}
