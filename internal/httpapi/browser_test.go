package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/browserguard"
)

// TestBrowserGuard: a request the guard refuses is answered 403 in the
// API's error shape, naming why, before the handler runs; others reach it.
func TestBrowserGuard(t *testing.T) {
	g, err := browserguard.New(browserguard.Options{Addr: "127.0.0.1:7400"})
	if err != nil {
		t.Fatal(err)
	}
	reached := false
	h := BrowserGuard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached = true; w.WriteHeader(http.StatusNoContent) }), g)
	for _, c := range []struct {
		name, host, origin string
		want               int
		why                string
	}{
		{"cli", "127.0.0.1:7400", "", http.StatusNoContent, ""},
		{"foreign page", "127.0.0.1:7400", "http://evil.example", http.StatusForbidden, "cross-origin write refused"},
		{"rebinding", "evil.example:7400", "", http.StatusForbidden, "host refused"},
	} {
		reached = false
		r := httptest.NewRequest("POST", "/v1/instances", strings.NewReader(`{}`))
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want || reached != (c.want == http.StatusNoContent) {
			t.Errorf("%s: %d (handler ran: %v), want %d", c.name, w.Code, reached, c.want)
		}
		if c.why != "" && (!strings.Contains(w.Body.String(), `{"error":{"code":"permission_denied","message":"`+c.why)) {
			t.Errorf("%s: %s, want permission_denied naming %q", c.name, w.Body, c.why)
		}
	}
}
