package gateway

import (
	"bytes"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzOriginForm: any request target either fails with an error or
// leaves an origin-form target and a host without user information.
func FuzzOriginForm(f *testing.F) {
	for _, s := range []string{"http://a/b", "HTTPS://a:8080?x=1", "http://", "http://u@a/", "ftp://a/", "http://a", "*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		var h fasthttp.RequestHeader
		h.SetRequestURI(target)
		h.SetHost("before.example")
		if err := originForm(&h); err != nil {
			return
		}
		if u := h.RequestURI(); len(u) == 0 || u[0] != '/' {
			t.Fatalf("%q: target %q is not origin form", target, u)
		}
		if host := h.Host(); len(host) == 0 || bytes.IndexByte(host, '@') >= 0 {
			t.Fatalf("%q: host %q", target, host)
		}
	})
}
