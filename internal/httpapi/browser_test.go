package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBrowserGuard: cross-origin writes and, on a loopback listener,
// foreign Hosts are refused with 403 before the handler runs; same-origin
// pages, programs (no Origin) and reads pass.
func TestBrowserGuard(t *testing.T) {
	reached := false
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached = true; w.WriteHeader(http.StatusNoContent) })
	loop, err := BrowserGuard(h, BrowserOptions{Addr: "127.0.0.1:7400", AllowedHosts: []string{"sextant.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	open, err := BrowserGuard(h, BrowserOptions{Addr: "0.0.0.0:7400"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                 string
		guard                http.Handler
		method, host, origin string
		fetchSite, ctype     string
		want                 int
		why                  string // in the refusal's message
	}{
		{"cli write", loop, "POST", "127.0.0.1:7400", "", "", "application/json", 204, ""},
		{"console write", loop, "POST", "127.0.0.1:7400", "http://127.0.0.1:7400", "same-origin", "application/json", 204, ""},
		{"console write, no fetch metadata", loop, "DELETE", "localhost:7400", "http://localhost:7400", "", "", 204, ""},
		{"foreign page, text/plain", loop, "POST", "127.0.0.1:7400", "http://evil.example", "cross-site", "text/plain", 403, "cross-origin write refused"},
		{"foreign page, old browser", loop, "POST", "127.0.0.1:7400", "http://evil.example", "", "text/plain", 403, "http://evil.example"},
		{"sandboxed page", loop, "PUT", "127.0.0.1:7400", "null", "", "text/plain", 403, "cross-origin"},
		{"same site, other port", loop, "POST", "localhost:7400", "http://localhost:3000", "same-site", "text/plain", 403, "cross-origin"},
		{"foreign page reads", loop, "GET", "127.0.0.1:7400", "http://evil.example", "cross-site", "", 204, ""},
		{"rebinding read", loop, "GET", "evil.example:7400", "", "", "", 403, `evil.example:7400\" refused`},
		{"rebinding write", loop, "POST", "evil.example:7400", "http://evil.example:7400", "same-origin", "text/plain", 403, "host"},
		{"allowed host", loop, "GET", "sextant.internal:7400", "", "", "", 204, ""},
		{"allowed host, trailing dot", loop, "GET", "SEXTANT.internal.:7400", "", "", "", 204, ""},
		{"ipv6 loopback", loop, "GET", "[::1]:7400", "", "", "", 204, ""},
		{"localhost subdomain", loop, "GET", "app.localhost:7400", "", "", "", 204, ""},
		{"no host (HTTP/1.0)", loop, "GET", "", "", "", "", 204, ""},
		{"any host off loopback", open, "GET", "sextant.example.com", "", "", "", 204, ""},
		{"cross-origin write off loopback", open, "POST", "sextant.example.com", "http://evil.example", "cross-site", "text/plain", 403, "cross-origin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			reached = false
			r := httptest.NewRequest(c.method, "/v1/instances", strings.NewReader(`{}`))
			r.Host = c.host
			for k, v := range map[string]string{"Origin": c.origin, "Sec-Fetch-Site": c.fetchSite, "Content-Type": c.ctype} {
				if v != "" {
					r.Header.Set(k, v)
				}
			}
			w := httptest.NewRecorder()
			c.guard.ServeHTTP(w, r)
			if w.Code != c.want {
				t.Fatalf("status %d, want %d: %s", w.Code, c.want, w.Body)
			}
			if c.want == 403 {
				if reached {
					t.Fatal("the handler ran for a refused request")
				}
				if !strings.Contains(w.Body.String(), `"code":"permission_denied"`) || !strings.Contains(w.Body.String(), c.why) {
					t.Fatalf("refusal %s, want permission_denied naming %q", w.Body, c.why)
				}
			}
		})
	}
	for _, bad := range []string{"http://x.example", "x.example:80", ""} {
		if _, err := BrowserGuard(h, BrowserOptions{AllowedHosts: []string{bad}}); err == nil {
			t.Errorf("allowed host %q accepted", bad)
		}
	}
}
