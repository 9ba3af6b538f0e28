package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The web console, served by a registry server (another origin), reads the
// admin API's answers; profiles stay same-origin.
func TestAdminReadableCrossOrigin(t *testing.T) {
	h := New(Options{}).AdminHandler(nil)
	for _, c := range []struct {
		method, path, want string
	}{
		{"GET", "/healthz", "*"},
		{"GET", "/v1/config", "*"},
		{"HEAD", "/healthz", "*"},
		{"GET", "/debug/pprof/", ""},
		{"POST", "/v1/config", ""},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.Header.Set("Origin", "http://127.0.0.1:7400")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Header().Get("Access-Control-Allow-Origin"); got != c.want {
			t.Errorf("%s %s: Access-Control-Allow-Origin %q, want %q", c.method, c.path, got, c.want)
		}
		if c.path == "/healthz" && w.Code != http.StatusOK {
			t.Errorf("%s %s: %d", c.method, c.path, w.Code)
		}
	}
}
