package console

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func serve(t *testing.T, method, path string, hdr map[string]string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	http.StripPrefix("/ui", Handler()).ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	var rd io.Reader = res.Body
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		rd = zr
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHandlerServesFiles(t *testing.T) {
	for _, c := range []struct{ path, ctype, contains string }{
		{"/ui/", "text/html; charset=utf-8", `<script type="module" src="js/app.js">`},
		{"/ui/index.html", "text/html; charset=utf-8", "<title>Sextant</title>"},
		{"/ui/js/app.js", "text/javascript; charset=utf-8", "parseRoute"},
		{"/ui/style.css", "text/css; charset=utf-8", ".vlist"},
		{"/ui/vendor/lib.js", "text/javascript; charset=utf-8", "export"},
		{"/ui/vendor/LICENSES.txt", "text/plain; charset=utf-8", "uplot"},
		{"/ui/favicon.svg", "image/svg+xml", "<svg"},
		// A route of the application, not a file: the page itself.
		{"/ui/services/default/orders", "text/html; charset=utf-8", "<title>Sextant</title>"},
	} {
		res := serve(t, "GET", c.path, map[string]string{"Accept-Encoding": "gzip"})
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != c.ctype {
			t.Fatalf("%s: %d %q", c.path, res.StatusCode, res.Header.Get("Content-Type"))
		}
		if b := body(t, res); !strings.Contains(b, c.contains) {
			t.Fatalf("%s: body lacks %q", c.path, c.contains)
		}
		for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "ETag"} {
			if res.Header.Get(h) == "" {
				t.Fatalf("%s: no %s header", c.path, h)
			}
		}
	}
}

func TestHandlerCompressesAndRevalidates(t *testing.T) {
	plain := serve(t, "GET", "/ui/vendor/lib.js", nil)
	zipped := serve(t, "GET", "/ui/vendor/lib.js", map[string]string{"Accept-Encoding": "br, gzip"})
	if plain.Header.Get("Content-Encoding") != "" || zipped.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("encodings: plain %q, gzip %q", plain.Header.Get("Content-Encoding"), zipped.Header.Get("Content-Encoding"))
	}
	pb, zb := body(t, plain), body(t, zipped)
	if pb != zb {
		t.Fatal("gzip body differs from the plain one")
	}
	if n := zipped.Header.Get("Content-Length"); n == "" || n == plain.Header.Get("Content-Length") {
		t.Fatalf("gzip length %q, plain %q", n, plain.Header.Get("Content-Length"))
	}
	etag := plain.Header.Get("ETag")
	again := serve(t, "GET", "/ui/vendor/lib.js", map[string]string{"If-None-Match": etag})
	if again.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d, want 304", again.StatusCode)
	}
	if res := serve(t, "HEAD", "/ui/js/app.js", nil); res.StatusCode != 200 || body(t, res) != "" {
		t.Fatalf("HEAD: %d", res.StatusCode)
	}
}

func TestHandlerRefuses(t *testing.T) {
	if res := serve(t, "GET", "/ui/js/missing.js", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("missing asset: %d, want 404", res.StatusCode)
	}
	if res := serve(t, "POST", "/ui/", nil); res.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d, want 405", res.StatusCode)
	}
	// No way out of the embedded tree.
	if res := serve(t, "GET", "/ui/../console.go", nil); res.StatusCode == 200 && strings.Contains(body(t, res), "package console") {
		t.Fatal("served a file outside assets/")
	}
}

// Nothing the page loads comes from another origin (works offline).
func TestNoRemoteAssets(t *testing.T) {
	for _, f := range []string{"/ui/", "/ui/style.css", "/ui/js/app.js"} {
		b := body(t, serve(t, "GET", f, nil))
		for _, bad := range []string{"https://", "//cdn", "http://"} {
			if i := strings.Index(b, bad); i >= 0 && !strings.Contains(b[max(0, i-40):i], "http://${") {
				t.Fatalf("%s refers to %q: %s", f, bad, b[max(0, i-40):min(len(b), i+40)])
			}
		}
	}
}
