package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sextant-mesh/sextant/internal/console"
	"github.com/sextant-mesh/sextant/internal/console/browsertest"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// consoleOn serves the console at /ui/ and proxies everything else to the
// real API stack at api (internal/httpapi/apitest).
func consoleOn(t *testing.T, api string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(api)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", console.Handler()))
	mux.Handle("/", httputil.NewSingleHostReverseProxy(u))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

const everyKind = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - route: [{destination: {host: orders}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  servers:
  - port: {number: 8080, name: http, protocol: HTTP}
    hosts: [shop.example.com]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: orders}
spec:
  selector: {matchLabels: {app: orders}}
  rules:
  - from:
    - source: {namespaces: [web]}
`

// The routing config page at 1400 and 1000 px, over the real API with one
// object of every kind: each is badged with its own kind's short name, the
// kind selector shows its longest kind whole, the New buttons (one per
// kind, the security kinds' included) sit inside the list's column
// without overlapping anything; a new AuthorizationPolicy's template
// passes the server's dry run, and a stored policy that left its action
// out shows Istio's default, action: ALLOW.
func TestConfigPageKinds(t *testing.T) {
	api := apitest.Start(t)
	resp, err := http.Post(api.URL+"/v1/config:apply", "application/yaml", strings.NewReader(everyKind))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("apply: %d %s", resp.StatusCode, body)
	}
	srv := consoleOn(t, api.URL)
	b := browsertest.Start(t)
	b.Navigate(t, srv.URL+"/ui/#/config")
	b.WaitTrue(t, 10*time.Second, "five objects listed", `document.querySelectorAll('#config-list a[data-key]').length === 5`)
	for _, w := range browsertest.Widths {
		b.Do(t, 10*time.Second, "viewport", chromedp.EmulateViewport(w, 900))
		b.WaitTrue(t, 5*time.Second, fmt.Sprintf("laid out at %d px", w), fmt.Sprintf(`innerWidth === %d`, w))
		bad := browsertest.Eval[[]string](t, b, `(() => {
			const out = [];
			const want = {VirtualService: 'VS', DestinationRule: 'DR', Gateway: 'GW', PeerAuthentication: 'PA', AuthorizationPolicy: 'AP'};
			for (const a of document.querySelectorAll('#config-list a[data-key]')) {
				const kind = a.dataset.key.split('/')[0];
				const got = a.querySelector('.kind').textContent.trim();
				if (got !== want[kind]) out.push(kind + ' badged ' + got + ', want ' + want[kind]);
			}
			const aside = document.querySelector('.split-list').getBoundingClientRect();
			const main = document.querySelector('.split-main').getBoundingClientRect();
			const sel = document.querySelector('.split-list select');
			// The select shows its longest option whole.
			const probe = document.createElement('span');
			probe.style.font = getComputedStyle(sel).font;
			probe.style.position = 'absolute';
			probe.textContent = 'AuthorizationPolicy';
			document.body.appendChild(probe);
			const need = probe.getBoundingClientRect().width + 30; // text, padding and the arrow
			probe.remove();
			if (sel.getBoundingClientRect().width < need) out.push('the kind selector is ' + Math.round(sel.getBoundingClientRect().width) + ' px, its longest kind needs ' + Math.round(need));
			const boxes = [sel, ...document.querySelectorAll('.split-list .toolbar .button')];
			for (const k of ['pa', 'ap', 'vs', 'dr', 'gw']) if (!document.querySelector('#config-new-' + k)) out.push('no New ' + k + ' button');
			const rs = boxes.map(e => [e, e.getBoundingClientRect()]);
			for (const [e, r] of rs) {
				const name = e.id || e.textContent;
				if (r.left < aside.left - 0.5 || r.right > aside.right + 0.5) out.push(name + ' sticks out of the list column');
				if (r.right > main.left && r.top < main.bottom && r.bottom > main.top) out.push(name + ' overlaps the editor pane');
				if (r.height > 40) out.push(name + ' wraps (' + Math.round(r.height) + ' px tall)');
			}
			for (let i = 0; i < rs.length; i++) for (let j = i + 1; j < rs.length; j++) {
				const [a, b] = [rs[i][1], rs[j][1]];
				if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
					out.push((rs[i][0].id || rs[i][0].textContent) + ' overlaps ' + (rs[j][0].id || rs[j][0].textContent));
			}
			return out;
		})()`)
		for _, p := range bad {
			t.Errorf("at %d px: %s", w, p)
		}
	}
	b.Do(t, 10*time.Second, "viewport", chromedp.EmulateViewport(browsertest.Widths[0], 900))

	// The stored policy without an action shows ALLOW.
	b.Click(t, `#config-list a[data-key="AuthorizationPolicy/default/orders"]`)
	b.WaitTrue(t, 10*time.Second, "the policy's YAML", `(document.querySelector('#config-editor') || {}).value?.includes('kind: AuthorizationPolicy')`)
	if text := browsertest.Eval[string](t, b, `document.querySelector('#config-editor').value`); !strings.Contains(text, "action: ALLOW") {
		t.Errorf("the stored policy shows without its action:\n%s", text)
	}
	// Shown so, it is what is stored: a dry run of it changes nothing.
	b.Click(t, "#config-dryrun")
	b.WaitTrue(t, 10*time.Second, "dry run", `document.querySelector('#config-diff') && document.querySelector('#config-diff').textContent.includes('unchanged')`)

	// New buttons of the security kinds and Telemetry open templates the server takes.
	for _, k := range []struct{ id, kind, ns string }{{"pa", "PeerAuthentication", "default"}, {"ap", "AuthorizationPolicy", "default"},
		{"tm", "Telemetry", "istio-system"}} {
		b.Click(t, "#config-new-"+k.id)
		b.WaitTrue(t, 10*time.Second, k.kind+" template", fmt.Sprintf(`(document.querySelector('#config-editor') || {}).value?.includes('kind: %s')`, k.kind))
		b.Click(t, "#config-dryrun")
		b.WaitTrue(t, 10*time.Second, k.kind+" dry run", fmt.Sprintf(`(document.querySelector('#config-diff') && document.querySelector('#config-diff').textContent.includes('%s %s/'))
			|| !!document.querySelector('#config-errors') || !!document.querySelector('.error')`, k.kind, k.ns))
		if errs := browsertest.Eval[string](t, b, `[...document.querySelectorAll('#config-errors, .error')].map(e => e.textContent).join('; ')`); errs != "" {
			t.Errorf("the %s template: %s", k.kind, errs)
		}
	}
	b.NoProblems(t, "config page")
}
