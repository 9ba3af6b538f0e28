package gateway

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// Skipping dropHopHeaders when requestMayHaveHop says so leaves every
// request as the deletes would: the upstream request is the same bytes.
func TestRequestMayHaveHop(t *testing.T) {
	for _, tc := range []struct {
		name, req string
		mayHave   bool
	}{
		{"plain", "GET /a HTTP/1.1\r\nHost: x\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n", false},
		{"cookies", "GET /a HTTP/1.1\r\nHost: x\r\nCookie: a=1; b=2\r\n\r\n", false},
		{"connection keep-alive", "GET /a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", true},
		{"connection names a header", "GET /a HTTP/1.1\r\nHost: x\r\nConnection: X-Secret\r\nX-Secret: 1\r\n\r\n", true},
		{"keep-alive", "GET /a HTTP/1.1\r\nHost: x\r\nkeep-alive: timeout=5\r\n\r\n", true},
		{"proxy-connection", "GET /a HTTP/1.1\r\nHost: x\r\nPROXY-CONNECTION: keep-alive\r\n\r\n", true},
		{"proxy-authorization", "GET /a HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic eA==\r\n\r\n", true},
		{"te", "GET /a HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n\r\n", true},
		{"trailer", "POST /a HTTP/1.1\r\nHost: x\r\nTrailer: X-T\r\nContent-Length: 0\r\n\r\n", true},
		{"upgrade", "GET /a HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\n\r\n", true},
		{"http/1.0 closes", "GET /a HTTP/1.0\r\nHost: x\r\n\r\n", true},
		{"http/1.0 keep-alive", "GET /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", true},
		{"connection close", "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", true},
		{"similar names", "GET /a HTTP/1.1\r\nHost: x\r\nX-Upgrade: 1\r\nTrailers: 1\r\nTe-X: 1\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var always, skipped fasthttp.Request
			for _, r := range []*fasthttp.Request{&always, &skipped} {
				if err := r.Read(bufio.NewReader(strings.NewReader(tc.req))); err != nil {
					t.Fatalf("read %q: %v", tc.req, err)
				}
			}
			if got := requestMayHaveHop(&skipped.Header); got != tc.mayHave {
				t.Errorf("requestMayHaveHop = %v, want %v", got, tc.mayHave)
			}
			dropHopHeaders(&always.Header)
			if requestMayHaveHop(&skipped.Header) {
				dropHopHeaders(&skipped.Header)
			}
			if a, s := always.String(), skipped.String(); a != s {
				t.Errorf("with the deletes:\n%q\nskipped:\n%q", a, s)
			}
		})
	}
	// A request built, not parsed, has no raw block: the deletes decide.
	var built fasthttp.Request
	built.Header.Set("Keep-Alive", "timeout=5")
	if !requestMayHaveHop(&built.Header) {
		t.Error("a built request: requestMayHaveHop = false")
	}
}

// BenchmarkRequestHop is the hop-header step of prepareRequest on wrk's
// request (no hop header): the nine deletes, against the one scan that
// now decides they are not needed.
func BenchmarkRequestHop(b *testing.B) {
	const raw = "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n"
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		b.Fatal(err)
	}
	b.Run("deletes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			dropHopHeaders(&req.Header)
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if requestMayHaveHop(&req.Header) {
				b.Fatal("a hop header in wrk's request")
			}
		}
	})
}
