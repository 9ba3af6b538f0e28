// Package browsertest runs the console's browser tests in Debian's headless
// Chromium, driven over the DevTools protocol (chromedp). It installs
// chromium and chromium-driver with apt-get when they are missing and the
// test runs as root, collects the page's console errors, and saves
// screenshots. It owns no server: tests start the real one themselves.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/sextant-mesh/sextant/internal/debian"
)

// ChromiumPath is Debian's Chromium; SEXTANT_CHROMIUM overrides it.
func ChromiumPath() string {
	if p := os.Getenv("SEXTANT_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// Problem is one error the page reported: a console.error, an uncaught
// exception, or an error entry of the browser's log (a failed load: URL set).
type Problem struct {
	Source, Text, URL string
}

func (p Problem) String() string {
	if p.URL != "" {
		return fmt.Sprintf("%s: %s (%s)", p.Source, p.Text, p.URL)
	}
	return p.Source + ": " + p.Text
}

// Browser is one headless Chromium with one tab.
type Browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []Problem
}

func ci() bool { return os.Getenv("CI") == "true" || os.Getenv("CI") == "1" }

// Start makes sure Chromium is installed, starts it headless with a fresh
// profile and opens a tab; both end with the test. Without Chromium (and
// no way to install it) the test is skipped, except under CI=true, where
// it fails: CI must run the browser tests.
func Start(t testing.TB) *Browser {
	t.Helper()
	if err := ensureChromium(); err != nil {
		if ci() {
			t.Fatalf("browsertest: Chromium is needed under CI: %v", err)
		}
		t.Skipf("browsertest: no Chromium (%v); install Debian's chromium and chromium-driver, or run as root to have them installed", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(ChromiumPath()),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root in containers
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 960),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// The first Run starts the browser and lives as long as ctx: no timeout
	// on it (chromedp.Run's rule).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("browsertest: start %s: %v", ChromiumPath(), err)
	}
	b := &Browser{ctx: ctx}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() { // owned by the test: ends when ctx does
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				src := m.Source
				if src == "" {
					src = string(m.Type)
				}
				b.mu.Lock()
				b.errs = append(b.errs, Problem{Source: src, Text: m.Text, URL: m.URL})
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-done
	})
	return b
}

// Problems returns the errors reported since the last call and forgets them.
func (b *Browser) Problems() []Problem {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.errs
	b.errs = nil
	return out
}

// NoProblems fails the test if the page reported errors other than failed
// loads of a URL containing one of allowed (answers the test provoked).
func (b *Browser) NoProblems(t testing.TB, where string, allowed ...string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond) // let the last events arrive
outer:
	for _, p := range b.Problems() {
		for _, a := range allowed {
			if p.Source == "network" && strings.Contains(p.URL, a) {
				continue outer
			}
		}
		t.Errorf("%s: the page reported %s", where, p)
	}
}

// Do runs actions in the tab, failing the test after d.
func (b *Browser) Do(t testing.TB, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v (page problems: %v)", what, err, b.Problems())
	}
}

// Eval evaluates a JavaScript expression (awaiting a promise) into T.
func Eval[T any](t testing.TB, b *Browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("eval %s: %v (page problems: %v)", short(expr), err, b.Problems())
	}
	return v
}

// WaitTrue polls a JavaScript condition until it holds, for up to d.
func (b *Browser) WaitTrue(t testing.TB, d time.Duration, what, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+cond+")"))
		if err == nil && ok {
			return
		}
		select {
		case <-ctx.Done():
			text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(document.querySelector('main') || document.body).innerText.slice(0, 1500)`))
			// A dialog is outside main: say so when one is open (a page
			// waiting on a prompt looks stuck otherwise).
			dialogs, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('[role=dialog]')].map(e => e.innerText.slice(0, 500)).join('\n---\n')`))
			if dialogs != "" {
				text += "\nopen dialogs:\n" + dialogs
			}
			t.Fatalf("%s: %s did not hold in %v (last error %v)\npage text:\n%s\nproblems: %v", what, cond, d, err, text, b.Problems())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// SetInput types value into the input or textarea sel the way typing
// reaches the page (an input event).
func (b *Browser) SetInput(t testing.TB, sel, value string) {
	t.Helper()
	ok := Eval[bool](t, b, fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false;
		el.focus(); el.value = %q; el.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, sel, value))
	if !ok {
		t.Fatalf("no element %s", sel)
	}
}

// Click clicks the first element matching the CSS selector sel once it is
// visible.
func (b *Browser) Click(t testing.TB, sel string) {
	t.Helper()
	b.Do(t, 10*time.Second, "click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// Navigate opens url and waits for the document to load.
func (b *Browser) Navigate(t testing.TB, url string) {
	t.Helper()
	b.Do(t, 20*time.Second, "navigate "+url, chromedp.Navigate(url))
}

// Widths are the viewport widths every page is checked and pictured at:
// a laptop's browser and a narrow window beside an editor.
var Widths = []int64{1400, 1000}

// Screenshot saves the viewport as PNG in $SEXTANT_CONSOLE_SCREENSHOTS (the
// docs' pictures: make screenshots), if set.
func (b *Browser) Screenshot(t testing.TB, name string) {
	t.Helper()
	b.save(t, os.Getenv("SEXTANT_CONSOLE_SCREENSHOTS"), name)
}

// Layout sets the viewport to each of Widths in turn and checks that
// nothing is clipped or wrapped there: no button, badge, duration or
// chart axis label breaks over two lines, no element sticks out of the
// page sideways, and no text is cut by its box. At 1400 px the page is
// saved as name (Screenshot); at the others too when
// $SEXTANT_CONSOLE_SCREENSHOTS_NARROW is set, as <width>px-name. It
// leaves the viewport at the first width.
func (b *Browser) Layout(t testing.TB, name string) {
	t.Helper()
	defer b.Do(t, 10*time.Second, "viewport", chromedp.EmulateViewport(Widths[0], 900))
	for i, w := range Widths {
		b.Do(t, 10*time.Second, "viewport", chromedp.EmulateViewport(w, 900))
		// Charts follow their box's width on the next frames.
		b.WaitTrue(t, 5*time.Second, fmt.Sprintf("laid out at %d px", w), fmt.Sprintf(`innerWidth === %d &&
			[...document.querySelectorAll('.chart-box')].every(c => !c.firstElementChild || Math.abs(c.firstElementChild.getBoundingClientRect().width - Math.max(c.clientWidth, 300)) < 2)`, w))
		if bad := Eval[[]string](t, b, layoutProblems); len(bad) > 0 {
			t.Errorf("%s at %d px: %s", name, w, strings.Join(bad, "; "))
		}
		if i == 0 {
			b.Screenshot(t, name)
		} else {
			b.save(t, os.Getenv("SEXTANT_CONSOLE_SCREENSHOTS_NARROW"), fmt.Sprintf("%dpx-%s", w, name))
		}
	}
}

// layoutProblems lists, in the page, what is wrapped, clipped or sticks
// out: one line of text is at most 1.6 line heights tall.
const layoutProblems = `(() => {
	const out = [];
	const oneLine = el => {
		const cs = getComputedStyle(el);
		const lh = parseFloat(cs.lineHeight) || parseFloat(cs.fontSize) * 1.45;
		// The content's box, not the element's: a cell is as tall as its row.
		const rg = document.createRange();
		rg.selectNodeContents(el);
		return rg.getBoundingClientRect().height <= lh * 1.6;
	};
	const name = el => (el.id ? '#' + el.id : el.tagName.toLowerCase() + (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\s+/).join('.') : '')) + ' "' + el.textContent.trim().slice(0, 40) + '"';
	const shown = el => el.getClientRects().length > 0;
	// Buttons, badges, figures, and the short pieces of text in cells
	// ("6 res", "sent 3 · acked 3", "12.5 ms").
	for (const el of document.querySelectorAll('button, .button, .badge, .stat-value, .stat-label, nav a, label.check, .ago, td, th, td span, td code')) {
		if (!shown(el)) continue;
		if ((el.tagName === 'TD' || el.tagName === 'TH') && !/^[0-9.,–]+\s?(%|µs|ms|s|min|h)?$/.test(el.textContent.trim().replace(/\u00a0/g, ' '))) continue;
		if (el.tagName !== 'TD' && el.tagName !== 'TH' && el.closest('td') && el.textContent.trim().length > 30) continue;
		if (!oneLine(el)) out.push('wraps: ' + name(el));
	}
	const width = document.documentElement.clientWidth;
	for (const el of document.querySelectorAll('main *')) {
		if (!shown(el)) continue;
		const r = el.getBoundingClientRect();
		if (r.right > width + 1 && !el.closest('.vlist, pre, .editor, .modal')) { out.push('sticks out: ' + name(el)); break; }
	}
	// Chart axes are drawn on a canvas: the charts note their x labels in
	// data-x-ticks, measured here at the axis' font.
	const ctx = document.createElement('canvas').getContext('2d');
	ctx.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif';
	for (const box of document.querySelectorAll('.chart-box[data-x-ticks]')) {
		if (!shown(box) || !box.dataset.xTicks) continue;
		const labels = box.dataset.xTicks.split('|');
		const over = box.querySelector('.u-over');
		const width = over ? over.getBoundingClientRect().width : box.clientWidth;
		const need = labels.reduce((n, l) => n + ctx.measureText(l).width + 6, 0);
		const fig = box.closest('figure') || box;
		if (need > width) out.push('axis labels overlap: ' + name(fig) + ' (' + Math.round(need) + ' px of labels in ' + Math.round(width) + ')');
		if (labels.some(l => /am|pm|\/|\n/.test(l))) out.push('axis label in another date format: ' + name(fig) + ': ' + labels.join(', '));
	}
	for (const el of document.querySelectorAll('.u-legend th, .u-axis, figcaption, .thead > span')) {
		if (!shown(el)) continue;
		if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflow !== 'visible') out.push('clipped: ' + name(el));
	}
	return out;
})()`

// save writes the viewport as PNG to dir/name, if dir is set.
func (b *Browser) save(t testing.TB, dir, name string) {
	t.Helper()
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// ensureChromium installs Debian's chromium and chromium-driver when
// Chromium is missing and this process may (package debian).
func ensureChromium() error {
	_, err := debian.Ensure(ChromiumPath(), "chromium", "chromium-driver")
	return err
}

// Eval0 evaluates a JavaScript expression for its effect.
func (b *Browser) Eval0(t testing.TB, expr string) {
	t.Helper()
	Eval[any](t, b, expr)
}
