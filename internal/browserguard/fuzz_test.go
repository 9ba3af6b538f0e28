package browserguard

import (
	"errors"
	"net/http/httptest"
	"testing"
)

// FuzzCheck: whatever a request's Host, Origin and Sec-Fetch-Site, Check
// does not panic; reads are never refused as cross-origin writes; a
// listener off loopback never refuses a Host; and a Host naming
// localhost is always known.
func FuzzCheck(f *testing.F) {
	for _, s := range [][4]string{
		{"POST", "127.0.0.1:7400", "http://evil.example", "cross-site"},
		{"GET", "evil.example:7400", "", ""},
		{"PUT", "[::1]:7400", "null", ""},
		{"DELETE", "localhost", "http://localhost", "same-origin"},
		{"POST", "[", "http://[", "none"},
		{"GET", "LOCALHOST.:80", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	loop, err := New(Options{Addr: "127.0.0.1:7400", AllowedHosts: []string{"sextant.internal"}})
	if err != nil {
		f.Fatal(err)
	}
	open, err := New(Options{Addr: "10.0.0.1:7400"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, host, origin, site string) {
		switch method {
		case "GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH":
		default:
			method = "POST"
		}
		r := httptest.NewRequest(method, "/", nil)
		r.Host = host
		r.Header.Set("Origin", origin)
		r.Header.Set("Sec-Fetch-Site", site)
		errLoop, errOpen := loop.Check(r), open.Check(r)
		if (method == "GET" || method == "HEAD" || method == "OPTIONS") && (errors.Is(errLoop, ErrCrossOrigin) || errors.Is(errOpen, ErrCrossOrigin)) {
			t.Fatalf("a %s refused as a cross-origin write: %v %v", method, errLoop, errOpen)
		}
		if errors.Is(errOpen, ErrHost) {
			t.Fatalf("off loopback, Host %q refused: %v", host, errOpen)
		}
		r.Host = "localhost:7400"
		if err := loop.Check(r); errors.Is(err, ErrHost) {
			t.Fatalf("localhost refused: %v", err)
		}
	})
}
