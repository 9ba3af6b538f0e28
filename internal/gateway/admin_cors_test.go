package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/browserguard"
)

// TestAdminReadableByConsoleOnly: the web console, served by a registry
// server (another origin), reads the admin API's answers; a page of any
// other site does not (the old "*" let every site read the calls through
// its visitors' browsers); profiles stay same-origin.
func TestAdminReadableByConsoleOnly(t *testing.T) {
	console := "http://127.0.0.1:7400"
	h := New(Options{}).AdminHandlerOptions(nil, AdminOptions{Origins: []string{console}, Pprof: true})
	for _, c := range []struct {
		method, path, origin, want string
	}{
		{"GET", "/healthz", console, console},
		{"GET", "/v1/config", console, console},
		{"HEAD", "/healthz", console, console},
		{"GET", "/v1/config", "http://evil.example", ""},
		{"GET", "/v1/config", "null", ""},
		{"GET", "/debug/pprof/", console, ""},
		{"POST", "/v1/config", console, ""},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.Header.Set("Origin", c.origin)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Header().Get("Access-Control-Allow-Origin"); got != c.want {
			t.Errorf("%s %s from %s: Access-Control-Allow-Origin %q, want %q", c.method, c.path, c.origin, got, c.want)
		}
		if c.path == "/healthz" && w.Code != http.StatusOK {
			t.Errorf("%s %s: %d", c.method, c.path, w.Code)
		}
	}
	// Without origins no page of another origin reads it.
	r := httptest.NewRequest("GET", "/v1/config", nil)
	r.Header.Set("Origin", console)
	w := httptest.NewRecorder()
	New(Options{}).AdminHandler(nil).ServeHTTP(w, r)
	if got := w.Header().Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("no origins configured: Access-Control-Allow-Origin %q", got)
	}
}

// TestAdminPprof: profiles (the process's memory) are served only when
// asked for, or behind the admin's authorization.
func TestAdminPprof(t *testing.T) {
	deny := func(*http.Request, AdminAccess) (int, error) { return http.StatusUnauthorized, errTestDenied }
	allow := func(*http.Request, AdminAccess) (int, error) { return 0, nil }
	g := New(Options{})
	for _, c := range []struct {
		name string
		h    http.Handler
		want int
	}{
		{"open admin", g.AdminHandler(nil), http.StatusNotFound},
		{"open admin, nil authorizer", g.AdminHandlerWith(nil, nil), http.StatusNotFound},
		{"pprof asked for", g.AdminHandlerOptions(nil, AdminOptions{Pprof: true}), http.StatusOK},
		{"admin acl, no token", g.AdminHandlerWith(nil, deny), http.StatusUnauthorized},
		{"admin acl, token", g.AdminHandlerWith(nil, allow), http.StatusOK},
	} {
		w := httptest.NewRecorder()
		c.h.ServeHTTP(w, httptest.NewRequest("GET", "/debug/pprof/", nil))
		if w.Code != c.want {
			t.Errorf("%s: /debug/pprof/ answered %d, want %d", c.name, w.Code, c.want)
		}
	}
}

var errTestDenied = errorString("no token")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestAdminBrowserGuard: on a loopback admin, a page that rebinds its own
// name to 127.0.0.1 cannot read the calls (403), nor can another site's
// page post to it; the console's reads, at the admin's IP address, pass.
func TestAdminBrowserGuard(t *testing.T) {
	console := "http://127.0.0.1:7400"
	bg, err := browserguard.New(browserguard.Options{Addr: "127.0.0.1:7403"})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{}).AdminHandlerOptions(nil, AdminOptions{Origins: []string{console}, Browser: bg})
	for _, c := range []struct {
		method, path, host, origin string
		want                       int
	}{
		{"GET", "/v1/config", "127.0.0.1:7403", console, http.StatusOK},
		{"GET", "/healthz", "localhost:7403", "", http.StatusOK},
		{"GET", "/v1/config", "evil.example:7403", "", http.StatusForbidden},
		{"POST", "/v1/rbac:dry-run", "127.0.0.1:7403", "http://evil.example", http.StatusForbidden},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s %s Host %s Origin %q: %d %s, want %d", c.method, c.path, c.host, c.origin, w.Code, w.Body, c.want)
		}
		if c.want == http.StatusForbidden && !strings.Contains(w.Body.String(), "permission_denied") {
			t.Errorf("%s %s: %s", c.method, c.path, w.Body)
		}
	}
}
