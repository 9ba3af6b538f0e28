package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sextant-mesh/sextant/internal/console/browsertest"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// A service page opened with an invalid selector in its URL shows the
// parser's error and says nothing is listed, at 1400 and 1000 px: not
// "Loading…" at revision 0 forever. Fixing the selector lists; the
// instance, registered with only the label version=v1 (as
// examples/keepalive does), shows v1 in the version column.
func TestServicePageInvalidSelectorInURL(t *testing.T) {
	api := apitest.Start(t)
	resp, err := http.Post(api.URL+"/v1/instances", "application/json", strings.NewReader(
		`{"instances":[{"id":"o1","service":"orders","host":"10.0.0.1","port":80,"metadata":{"zone":"a","version":"v1"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b0, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("register: %d %s", resp.StatusCode, b0)
	}
	srv := consoleOn(t, api.URL)
	b := browsertest.Start(t)
	for _, w := range browsertest.Widths {
		b.Do(t, 10*time.Second, "viewport", chromedp.EmulateViewport(w, 900))
		b.Navigate(t, srv.URL+"/ui/#/services/default/orders?selector=zone%20in%20(a")
		b.WaitTrue(t, 10*time.Second, fmt.Sprintf("the selector's error at %d px", w), `(document.querySelector('#selector-error') || {}).textContent?.includes('selector')`)
		// Settled: the page says what it has, and no revision it never read.
		b.WaitTrue(t, 5*time.Second, "no Loading…", `!document.querySelector('#instance-count').textContent.includes('Loading')`)
		if got := browsertest.Eval[string](t, b, `document.querySelector('#instance-count').textContent + ' | ' + document.querySelector('h1').textContent`); !strings.Contains(got, "fix the selector") || strings.Contains(got, "revision 0") {
			t.Errorf("at %d px the page says %q", w, got)
		}
	}
	b.SetInput(t, "#selector-input", "zone=a")
	b.WaitTrue(t, 10*time.Second, "listed once fixed", `document.querySelector('#instance-count').textContent.startsWith('1 instance matches')
		&& document.querySelector('#service-revision') && !document.querySelector('#service-revision').textContent.includes('revision 0')`)
	if v := browsertest.Eval[string](t, b, `(() => { const cols = [...document.querySelectorAll('.thead.inst-row span')].map(s => s.textContent);
		return document.querySelector('.inst-row[data-id="o1"]').children[cols.indexOf('version')].textContent; })()`); v != "v1" {
		t.Errorf("the version column shows %q, want v1", v)
	}
	// Where it comes from: registered through Sextant's API.
	if v := browsertest.Eval[string](t, b, `(() => { const cols = [...document.querySelectorAll('.thead.inst-row span')].map(s => s.textContent);
		return document.querySelector('.inst-row[data-id="o1"]').children[cols.indexOf('source')].textContent + ' | ' + document.querySelector('#instance-sources').textContent; })()`); v != "Sextant API | from Sextant API 1" {
		t.Errorf("the source column and summary show %q, want Sextant API | from Sextant API 1", v)
	}
	b.NoProblems(t, "invalid selector", "/instances")
}

// A percent chart's axis reads as percent when every rate is 0: 0 to 5 %,
// its ticks written with "%", not 0 to 1 (read as a ratio); a rate of 40
// draws up to 44.
func TestPercentChartAxis(t *testing.T) {
	srv := httptest.NewServer(consoleOnly())
	defer srv.Close()
	b := browsertest.Start(t)
	b.Navigate(t, srv.URL+"/ui/vendor/LICENSES.txt") // same origin, no app
	type axis struct {
		Max   float64 `json:"max"`
		Ticks string  `json:"ticks"`
	}
	got := browsertest.Eval[[]axis](t, b, `(async () => {
		const ui = await import('/ui/js/ui.js');
		const lib = await import('/ui/vendor/lib.js');
		const out = [];
		for (const ys of [[0, 0, 0], [0, 40, 10]]) {
			const div = document.createElement('div');
			div.style.width = '600px';
			document.body.appendChild(div);
			lib.render(lib.html`+"`"+`<${ui.Chart} title="errors" yLabel="%" percent=${true} series=${[{ label: 'errors', unit: '%' }]} data=${[[1000, 1060, 1120], ys]} />`+"`"+`, div);
			const box = div.querySelector('.chart-box');
			for (let i = 0; i < 100 && !box.dataset.yTicks; i++) await new Promise(r => setTimeout(r, 20));
			out.push({ max: Number(box.dataset.yMax), ticks: box.dataset.yTicks || '' });
		}
		return out;
	})()`)
	if len(got) != 2 {
		t.Fatalf("%v", got)
	}
	if got[0].Max != 5 {
		t.Errorf("all rates 0: the axis runs to %v, want 5", got[0].Max)
	}
	if got[1].Max < 40 || got[1].Max > 100 {
		t.Errorf("a rate of 40: the axis runs to %v", got[1].Max)
	}
	for _, a := range got {
		for _, tick := range strings.Split(a.Ticks, "|") {
			if !strings.HasSuffix(tick, "%") {
				t.Errorf("tick %q (all: %q) is not a percentage", tick, a.Ticks)
			}
		}
	}
	b.NoProblems(t, "percent chart", "/favicon.ico")
}
