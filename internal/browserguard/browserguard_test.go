package browserguard

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCheck: cross-origin writes and, on a loopback listener, foreign
// Hosts are refused, naming why; same-origin pages, programs (no Origin)
// and reads pass.
func TestCheck(t *testing.T) {
	loop, err := New(Options{Addr: "127.0.0.1:7400", AllowedHosts: []string{"sextant.internal"}, HostsFlag: "--allowed-hosts"})
	if err != nil {
		t.Fatal(err)
	}
	open, err := New(Options{Addr: "0.0.0.0:7400"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                 string
		guard                *Guard
		method, host, origin string
		fetchSite, ctype     string
		want                 error
		why                  string // in the refusal's message
	}{
		{"cli write", loop, "POST", "127.0.0.1:7400", "", "", "application/json", nil, ""},
		{"console write", loop, "POST", "127.0.0.1:7400", "http://127.0.0.1:7400", "same-origin", "application/json", nil, ""},
		{"console write, no fetch metadata", loop, "DELETE", "localhost:7400", "http://localhost:7400", "", "", nil, ""},
		{"foreign page, text/plain", loop, "POST", "127.0.0.1:7400", "http://evil.example", "cross-site", "text/plain", ErrCrossOrigin, "cross-origin write refused"},
		{"foreign page, old browser", loop, "POST", "127.0.0.1:7400", "http://evil.example", "", "text/plain", ErrCrossOrigin, "http://evil.example"},
		{"sandboxed page", loop, "PUT", "127.0.0.1:7400", "null", "", "text/plain", ErrCrossOrigin, "cross-origin"},
		{"same site, other port", loop, "POST", "localhost:7400", "http://localhost:3000", "same-site", "text/plain", ErrCrossOrigin, "cross-origin"},
		{"foreign page reads", loop, "GET", "127.0.0.1:7400", "http://evil.example", "cross-site", "", nil, ""},
		{"rebinding read", loop, "GET", "evil.example:7400", "", "", "", ErrHost, `"evil.example:7400": this server listens on loopback and answers only to localhost, IP addresses and --allowed-hosts`},
		{"rebinding write", loop, "POST", "evil.example:7400", "http://evil.example:7400", "same-origin", "text/plain", ErrHost, "host"},
		{"allowed host", loop, "GET", "sextant.internal:7400", "", "", "", nil, ""},
		{"allowed host, trailing dot", loop, "GET", "SEXTANT.internal.:7400", "", "", "", nil, ""},
		{"ipv6 loopback", loop, "GET", "[::1]:7400", "", "", "", nil, ""},
		{"localhost subdomain", loop, "GET", "app.localhost:7400", "", "", "", nil, ""},
		{"no host (HTTP/1.0)", loop, "GET", "", "", "", "", nil, ""},
		{"any host off loopback", open, "GET", "sextant.example.com", "", "", "", nil, ""},
		{"cross-origin write off loopback", open, "POST", "sextant.example.com", "http://evil.example", "cross-site", "text/plain", ErrCrossOrigin, "cross-origin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, "/v1/instances", strings.NewReader(`{}`))
			r.Host = c.host
			for k, v := range map[string]string{"Origin": c.origin, "Sec-Fetch-Site": c.fetchSite, "Content-Type": c.ctype} {
				if v != "" {
					r.Header.Set(k, v)
				}
			}
			err := c.guard.Check(r)
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("error %v, want %v naming %q", err, c.want, c.why)
			}
		})
	}
	for _, bad := range []string{"http://x.example", "x.example:80", ""} {
		if _, err := New(Options{AllowedHosts: []string{bad}}); err == nil {
			t.Errorf("allowed host %q accepted", bad)
		}
	}
}
