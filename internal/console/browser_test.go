package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/console"
	"github.com/sextant-mesh/sextant/internal/console/browsertest"
)

// syntaxText and parserText are not YAML: go-yaml's scanner finds the
// first's problem (line 8, in document 2), its parser the second's (line 6).
const (
	syntaxText = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a}\nspec: {host: a}\n---\nb: 2\nx: 1\nc: d: e\n"
	parserText = "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: a\n bad: 1\n"
)

// syntaxMessage is the message the API answers for text (config.Decode's,
// as internal/httpapi passes it on), as a JS string literal.
func syntaxMessage(t *testing.T, text string) string {
	t.Helper()
	_, err := config.Decode([]byte(text))
	if err == nil {
		t.Fatalf("%q decodes", text)
	}
	return jsString(strings.TrimPrefix(err.Error(), "config: "))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The console's own logic, run where it runs: in Chromium, on the module
// files as served. (The pages against the real server: cmd/sextant's
// console_test.go.)
func TestConsoleScriptsInBrowser(t *testing.T) {
	srv := httptest.NewServer(consoleOnly())
	defer srv.Close()
	b := browsertest.Start(t)
	b.Navigate(t, srv.URL+"/ui/vendor/LICENSES.txt") // same origin, no app
	type check struct {
		Name string `json:"name"`
		Got  any    `json:"got"`
		Want any    `json:"want"`
	}
	checks := browsertest.Eval[[]check](t, b, `(async () => {
		const y = await import('/ui/js/yamlpath.js');
		const d = await import('/ui/js/diff.js');
		const p = await import('/ui/js/placement.js');
		const push = await import('/ui/js/push.js');
		const h = await import('/ui/js/hosts.js');
		const cfg = await import('/ui/js/config.js');
		const ui = await import('/ui/js/ui.js');
		const text = [
			'# leading comment',            // 1
			'apiVersion: networking.istio.io/v1', // 2
			'kind: VirtualService',         // 3
			'metadata: {name: a}',          // 4
			'spec:',                        // 5
			'  hosts: [orders]',            // 6
			'  http:',                      // 7
			'  - route:',                   // 8
			'    - destination: {host: orders}', // 9
			'    mirror: {host: x}',        // 10
			'---',                          // 11
			'# only a comment',             // 12
			'---',                          // 13
			'kind: DestinationRule',        // 14
			'metadata:',                    // 15
			'  name: b',                    // 16
			'  annotations:',               // 17
			'    sextant.io/load-balancer: nope', // 18
			'spec:',                        // 19
			'  host: orders',               // 20
			'  subsets:',                   // 21
			'  - name: v1',                 // 22
			'    labels: {version: v1}',    // 23
			'  - name: v1',                 // 24
			'  trafficPolicy: {outlierDetection: {max_ejection_percent: 200}}', // 25
		].join('\n');
		const err = {field: 'documents[0].spec.http[0].mirror', message: 'config: 5 problems:\n' +
			'  document 1: spec.http[0].mirror: not supported\n' +
			'  document 2: metadata.annotations.sextant.io/load-balancer: "nope" is not a policy\n' +
			'  document 2: spec.subsets[1].name: "v1": another subset has this name\n' +
			'  document 2: spec.trafficPolicy.outlierDetection.maxEjectionPercent: 200: must be 0..100\n' +
			'  document 2: spec.missing.deeper: required'};
		const probs = y.problems(err, text);
		const single = y.problems({field: 'spec.hosts[0]', message: 'spec.hosts[0]: "*": wildcards are not supported'}, 'kind: VirtualService\nspec:\n  hosts:\n  - "*"\n');
		const syntax = y.problems({field: '', message: `+syntaxMessage(t, syntaxText)+`}, `+jsString(syntaxText)+`);
		const parser = y.problems({field: '', message: `+syntaxMessage(t, parserText)+`}, `+jsString(parserText)+`);
		const diff = d.diffLines('a\nb\nc\nd', 'a\nB\nc\nd\ne').map(l => l.op + l.text).join('|');
		const hist = push.parseHistograms('# HELP x\nsextant_push_acked_seconds_bucket{type="clusters",le="0.001"} 2\nsextant_push_acked_seconds_bucket{type="clusters",le="0.002"} 4\nsextant_push_acked_seconds_bucket{type="clusters",le="+Inf"} 4\nsextant_push_acked_seconds_count{type="clusters"} 4\nsextant_push_acked_seconds_bucket{type="routes",le="0.001"} 0\nsextant_push_acked_seconds_bucket{type="routes",le="0.002"} 0\nsextant_push_acked_seconds_bucket{type="routes",le="+Inf"} 4\nsextant_push_acked_seconds_count{type="routes"} 4\n', ['sextant_push_acked_seconds']).sextant_push_acked_seconds;
		return [
			{name: 'lines of five problems', got: probs.map(p => p.line), want: [10, 18, 24, 25, 19]},
			{name: 'document numbers', got: probs.map(p => p.doc), want: [1, 2, 2, 2, 2]},
			{name: 'paths', got: probs[1].path, want: 'metadata.annotations.sextant.io/load-balancer'},
			{name: 'single document', got: single.map(p => [p.line, p.message]), want: [[4, '"*": wildcards are not supported']]},
			{name: 'yaml syntax line', got: syntax.map(p => [p.line, p.doc]), want: [[8, 2]]},
			{name: 'yaml parser error line', got: parser[0].line, want: 6},
			{name: 'documents split as the server does', got: y.splitDocs(text).map(d => d.start), want: [0, 13]},
			{name: 'diff', got: diff, want: ' a|-b|+B| c| d|+e'},
			{name: 'quantities', got: ['500m', '2', '1Gi', '1.5k', '2e3', 'x'].map(p.quantity), want: [0.5, 2, 1073741824, 1500, 2000, null]},
			{name: 'histogram merged over types', got: hist.buckets.map(b => b[1]), want: [2, 4, 8]},
			{name: 'p50 interpolated', got: push.quantile(0.5, hist.buckets, hist.count), want: 0.002},
			{name: 'p25', got: push.quantile(0.25, hist.buckets, hist.count), want: 0.001},
			{name: 'push state', got: [
				push.pushState({version_sent: '3', version_acked: '3', responses: 1}),
				push.pushState({version_sent: '4', version_acked: '3', responses: 2}),
				push.pushState({version_sent: '4', version_acked: '3', responses: 2, nacks: [{version: '4'}]}),
				push.pushState({version_sent: '', version_acked: '', responses: 0})], want: ['SYNCED', 'STALE', 'NACKED', 'NOT SENT']},
			{name: 'YAML 1.1 strings stay strings', got: cfg.toYAML({a: 'yes', b: 'on', c: 'no'}), want: 'a: "yes"\nb: "on"\nc: "no"\n'},
			{name: 'map keys in brackets', got: y.problems({message: 'spec.http[0].match[0].headers[x-canary].exact: want a string, got a boolean'},
				'spec:\n  http:\n  - match:\n    - headers:\n        x-canary:\n          exact: yes\n').map(p => p.line), want: [6]},
			{name: 'counts', got: [ui.count(1, 'node'), ui.count(2, 'node'), ui.count(0, 'endpoint set'), ui.count(1, 'NACK'), ui.count(12000, 'call'), ui.count(2, 'is', 'are')],
				want: ['1 node', '2 nodes', '0 endpoint sets', '1 NACK', '12,000 calls', '2 are']},
			{name: 'one date format', got: [ui.when(new Date(2026, 10, 26, 9, 5, 7)), ui.when(new Date(2026, 0, 2, 23, 59, 0).getTime()), ui.when(null)],
				want: ['2026-11-26 09:05:07', '2026-01-02 23:59:00', '–']},
			{name: 'durations never wrap', got: [ui.fmtMs(12.5), ui.fmtMs(0.02), ui.fmtMs(2500), ui.ago(new Date(Date.now() - 5500)), ui.ago(new Date(Date.now() - 3 * 86400e3))].map(v => v.replace(/\u00a0/g, '_')),
				want: ['12.5_ms', '20_µs', '2.5_s', '5_s_ago', '3_days_ago']},
			{name: 'instance sources', got: [
				ui.instanceSource({metadata: {'sextant.io/owner': 'kubernetes', app: 'web'}}),
				ui.instanceSource({metadata: {'consul-node': 'node-1'}}),
				ui.instanceSource({metadata: {version: 'v1'}}),
				ui.instanceSource({}),
				ui.sourceCounts([{metadata: {'sextant.io/owner': 'kubernetes'}}, {metadata: {}}, {metadata: {'sextant.io/owner': 'kubernetes'}}])],
				want: ['Kubernetes', 'Consul API', 'Sextant API', 'Sextant API', 'Kubernetes 2, Sextant API 1']},
			{name: 'percentages', got: [ui.fmtPct(1, 3), ui.fmtPct(0, 5), ui.fmtPct(0, 0), ui.fmtPct(0.05, 1)], want: ['33.3%', '0%', '–', '5%']},
			{name: 'hosts', got: [h.serviceOfHost('orders', 'prod'), h.serviceOfHost('orders.default.svc.cluster.local', 'prod'), h.serviceOfHost('a.b.default', 'x')],
				want: [{namespace: 'prod', name: 'orders'}, {namespace: 'default', name: 'orders'}, {namespace: 'default', name: 'a.b'}]},
		];
	})()`)
	if len(checks) == 0 {
		t.Fatal("no checks ran")
	}
	for _, c := range checks {
		got, _ := json.Marshal(c.Got)
		want, _ := json.Marshal(c.Want)
		if string(got) != string(want) {
			t.Errorf("%s: got %s, want %s", c.Name, got, want)
		}
	}
	b.NoProblems(t, "scripts", "/favicon.ico") // a text file has no icon link
}

func consoleOnly() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", console.Handler()))
	return mux
}

// fakeScheduler answers GET /v1/nodes, GET and POST /v1/placements and
// DELETE /v1/placements/{ns}/{name} in docs/api.md's shapes. It stands in
// for the scheduler's HTTP API, which is not in this tree yet (it is wired
// in another branch); the rest of the console is tested against the real
// server in cmd/sextant.
type fakeScheduler struct {
	mu        sync.Mutex
	selectors []string
	placed    []map[string]any
	dryRuns   []bool // per POST /v1/placements: was it ?dry_run=true
	deleted   []string
}

func (f *fakeScheduler) routes(mux *http.ServeMux) {
	node := func(name, zone, cpu, mem string, unsched bool, reqCPU, reqMem string, n int) map[string]any {
		return map[string]any{"node": map[string]any{"apiVersion": "v1", "kind": "Node",
			"metadata": map[string]any{"name": name, "labels": map[string]string{"zone": zone, "kubernetes.io/hostname": name}},
			"spec":     map[string]any{"unschedulable": unsched},
			"status":   map[string]any{"allocatable": map[string]string{"cpu": cpu, "memory": mem, "pods": "110"}}},
			"requested": map[string]string{"cpu": reqCPU, "memory": reqMem}, "placements": n}
	}
	nodes := []map[string]any{
		node("n-1", "z1", "4", "16Gi", false, "3500m", "6Gi", 7),
		node("n-2", "z1", "8", "32Gi", false, "2", "30Gi", 4),
		node("n-3", "z2", "4", "16Gi", true, "500m", "1Gi", 1),
	}
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /v1/acl/self", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"acl_enabled": false, "anonymous": true})
	})
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		sel := r.URL.Query().Get("selector")
		f.mu.Lock()
		f.selectors = append(f.selectors, sel)
		f.mu.Unlock()
		out := nodes
		if sel != "" {
			k, v, ok := strings.Cut(sel, "=")
			if !ok || strings.ContainsAny(v, "(") {
				writeJSON(w, 400, map[string]any{"error": map[string]string{"code": "invalid_argument",
					"message": "selector: " + sel + ": want key=value", "field": "selector"}})
				return
			}
			out = nil
			for _, n := range nodes {
				if n["node"].(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]string)[k] == v {
					out = append(out, n)
				}
			}
		}
		writeJSON(w, 200, map[string]any{"revision": 7, "items": out, "next_page_token": ""})
	})
	mux.HandleFunc("GET /v1/placements", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"revision": 7, "items": []map[string]any{
			{"namespace": "default", "name": "web-1", "node": "n-1", "labels": map[string]string{"app": "web"}, "requests": map[string]string{"cpu": "500m", "memory": "256Mi"}},
			{"namespace": "default", "name": "db-1", "node": "n-2", "labels": map[string]string{"app": "db"}, "requests": map[string]string{"cpu": "2", "memory": "8Gi"}},
		}, "next_page_token": ""})
	})
	mux.HandleFunc("POST /v1/placements", func(w http.ResponseWriter, r *http.Request) {
		var pod map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &pod); err != nil {
			writeJSON(w, 400, map[string]any{"error": map[string]string{"code": "invalid_argument", "message": err.Error()}})
			return
		}
		f.mu.Lock()
		f.placed = append(f.placed, pod)
		f.dryRuns = append(f.dryRuns, r.URL.Query().Get("dry_run") == "true")
		f.mu.Unlock()
		md := pod["metadata"].(map[string]any)
		res := map[string]any{"namespace": "default", "name": md["name"]}
		spec, _ := pod["spec"].(map[string]any)
		if ns, _ := spec["nodeSelector"].(map[string]any); ns["zone"] == "z9" {
			res["unschedulable"] = "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."
		} else {
			res["node"] = "n-2"
		}
		writeJSON(w, 200, map[string]any{"revision": 8, "results": []any{res}})
	})
	mux.HandleFunc("DELETE /v1/placements/{ns}/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.deleted = append(f.deleted, r.PathValue("ns")+"/"+r.PathValue("name"))
		f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"revision": 9})
	})
}

// The Placement page over the scheduler's API (a fake: see fakeScheduler).
func TestPlacementPage(t *testing.T) {
	f := &fakeScheduler{}
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", console.Handler()))
	f.routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b := browsertest.Start(t)
	b.Navigate(t, srv.URL+"/ui/#/placement")
	b.WaitTrue(t, 10*time.Second, "nodes drawn", `document.querySelectorAll('#node-list .node').length === 3`)
	// Requested against allocatable, as bars: n-1 asks 3.5 of 4 cpus.
	pct := browsertest.Eval[string](t, b, `document.querySelector('[data-node="n-1"] [data-res="cpu"]').dataset.pct`)
	if pct != "88" {
		t.Fatalf("n-1 cpu bar at %s%%, want 88", pct)
	}
	b.WaitTrue(t, 5*time.Second, "placements listed", `document.querySelectorAll('#placement-list tbody tr').length === 2`)
	if got := browsertest.Eval[string](t, b, `document.querySelector('[data-node="n-3"] .placed-count').textContent.trim()`); got != "1 placement" {
		t.Errorf("n-3 shows %q, want \"1 placement\"", got)
	}
	b.Layout(t, "placement.png")
	b.NoProblems(t, "placement page")

	// Filter by label selector; a bad one shows the server's error.
	b.SetInput(t, "#node-selector", "zone=z2")
	b.Eval0(t, `document.querySelector('#node-selector').dispatchEvent(new Event('change', {bubbles: true}))`)
	b.WaitTrue(t, 5*time.Second, "filtered", `document.querySelectorAll('#node-list .node').length === 1 && !!document.querySelector('[data-node="n-3"]')`)
	b.SetInput(t, "#node-selector", "zone in (z1")
	b.Eval0(t, `document.querySelector('#node-selector').dispatchEvent(new Event('change', {bubbles: true}))`)
	b.WaitTrue(t, 5*time.Second, "selector error", `document.querySelector('#node-selector-error').textContent.includes('want key=value')`)
	b.NoProblems(t, "bad selector", "/v1/nodes")

	// Try a placement: a dry run, nothing placed nor deleted.
	b.Click(t, "#try-run")
	b.WaitTrue(t, 5*time.Second, "placed", `(document.querySelector('#try-node') || {}).textContent === 'n-2'`)
	f.mu.Lock()
	placed, dry, deleted := len(f.placed), append([]bool(nil), f.dryRuns...), append([]string(nil), f.deleted...)
	name := ""
	if placed == 1 {
		name = f.placed[0]["metadata"].(map[string]any)["name"].(string)
	}
	f.mu.Unlock()
	if placed != 1 || !dry[0] || !strings.HasPrefix(name, "console-try-") || len(deleted) != 0 {
		t.Fatalf("asked %d (%q, dry run %v), deleted %v; want one dry run and no delete", placed, name, dry, deleted)
	}
	if cls := browsertest.Eval[string](t, b, `document.querySelector('#try-result').className`); cls != "note" {
		t.Errorf("a pod that fits is shown in a %q box, want note", cls)
	}
	// And one that fits nowhere shows kube-scheduler's reasons, as a failure.
	b.SetInput(t, "#try-pod", "apiVersion: v1\nkind: Pod\nspec:\n  nodeSelector: {zone: z9}\n  containers: [{name: a}]\n")
	b.Click(t, "#try-run")
	b.WaitTrue(t, 5*time.Second, "reasons", `(document.querySelector('#try-reasons') || {}).textContent?.startsWith('0/3 nodes are available')`)
	if cls := browsertest.Eval[string](t, b, `document.querySelector('#try-result').className`); cls != "error" {
		t.Errorf("an unschedulable pod is shown in a %q box, want error", cls)
	}
	b.NoProblems(t, "try a placement")
}

// A 401 that answers a token the user has since replaced (another
// request's prompt was answered while this one was on its way) is retried
// with the new token, not taken for a refusal of it: asking again would
// leave the request, and the page waiting on it, on a prompt nobody
// answers (TestConsoleACL hung at "Loading…" that way on a loaded
// machine). The server here answers "slow" only once "fast" has come back
// with the token the prompt gave, so the race goes the same way each run.
func TestConsoleTokenGivenMidRequest(t *testing.T) {
	const good = "sxt_good"
	var mu sync.Mutex
	var tokens []string             // per request: path and the token it carried
	answered := make(chan struct{}) // "fast" came with the good token
	var once sync.Once
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", console.Handler()))
	mux.HandleFunc("GET /v1/t/{name}", func(w http.ResponseWriter, r *http.Request) {
		name, auth := r.PathValue("name"), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		mu.Lock()
		tokens = append(tokens, name+":"+auth)
		mu.Unlock()
		if name == "fast" && auth == good {
			once.Do(func() { close(answered) })
		}
		if name == "slow" && auth != good {
			select {
			case <-answered:
			case <-time.After(10 * time.Second):
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if auth != good {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"code":"unauthenticated","message":"the token is not valid"}}`))
			return
		}
		w.Write([]byte(`{"name":"` + name + `"}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b := browsertest.Start(t)
	b.Navigate(t, srv.URL+"/ui/vendor/LICENSES.txt") // same origin, no app
	type result struct {
		Prompts []string `json:"prompts"`
		Answers []string `json:"answers"`
	}
	// The user first pastes a wrong token, then the right one.
	got := browsertest.Eval[result](t, b, `(async () => {
		const api = await import('/ui/js/api.js');
		sessionStorage.clear();
		const prompts = [];
		api.setTokenPrompt(async msg => { prompts.push(msg); return prompts.length === 1 ? 'sxt_wrong' : '`+good+`'; });
		const answers = await Promise.all(['fast', 'slow'].map(n => api.get('/v1/t/' + n).then(a => a.name, e => 'failed: ' + e.message)));
		return {prompts, answers};
	})()`)
	if strings.Join(got.Answers, ",") != "fast,slow" {
		t.Errorf("answers %q, want fast and slow", got.Answers)
	}
	if len(got.Prompts) != 2 || !strings.Contains(got.Prompts[1], "refused") {
		t.Errorf("prompts %q, want two: the first token, then the refused one's", got.Prompts)
	}
	mu.Lock()
	defer mu.Unlock()
	// Each path's requests in order: fast without a token, with the
	// wrong one, with the good one; slow without a token, then (its 401
	// answering a token since replaced) with the good one, not a third
	// prompt. The two paths' requests may interleave in any order (on a
	// loaded machine slow's first may arrive after fast's second).
	byPath := map[string][]string{}
	for _, pt := range tokens {
		path, tok, _ := strings.Cut(pt, ":")
		byPath[path] = append(byPath[path], tok)
	}
	if got, want := strings.Join(byPath["fast"], " "), " sxt_wrong "+good; got != want {
		t.Errorf("fast's tokens %q, want %q (all requests, path:token: %q)", got, want, tokens)
	}
	if got, want := strings.Join(byPath["slow"], " "), " "+good; got != want {
		t.Errorf("slow's tokens %q, want %q (all requests, path:token: %q)", got, want, tokens)
	}
	b.NoProblems(t, "token race", "/v1/t/", "/favicon.ico") // a text file has no icon link
}

// A server still loading its catalog answers 503 to every API route: the
// header's identity asks again until it has loaded, rather than saying
// "not signed in" until the page is reloaded.
func TestConsoleIdentityWhileTheServerLoads(t *testing.T) {
	var loaded atomic.Bool
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", console.Handler()))
	mux.HandleFunc("GET /v1/acl/self", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !loaded.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"code":"unavailable","message":"the registry is still loading"}}`))
			return
		}
		w.Write([]byte(`{"acl_enabled":true,"anonymous":false,"accessor_id":"0123456789","description":"console test"}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b := browsertest.Start(t)
	b.Navigate(t, srv.URL+"/ui/#/no-such-page") // no page's own requests
	b.WaitTrue(t, 10*time.Second, "loading said", `(document.querySelector('.who') || {}).textContent === 'server loading…'`)
	loaded.Store(true)
	b.WaitTrue(t, 10*time.Second, "signed in once loaded", `(document.querySelector('.who') || {}).textContent?.includes('console test')`)
	b.NoProblems(t, "identity", "/v1/acl/self") // the 503s
}
