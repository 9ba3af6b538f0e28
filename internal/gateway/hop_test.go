package gateway

import (
	"bufio"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// Skipping dropHopHeaders when scanRequestHead finds no hop-by-hop field
// leaves every request as the deletes would: the upstream request is the
// same bytes.
func TestScanRequestHead(t *testing.T) {
	for _, tc := range []struct {
		name, req string
		want      requestHead
	}{
		{"plain", "GET /a HTTP/1.1\r\nHost: x\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n", 0},
		{"cookies", "GET /a HTTP/1.1\r\nHost: x\r\nCookie: a=1; b=2\r\n\r\n", 0},
		{"connection keep-alive", "GET /a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", headHop},
		{"connection names a header", "GET /a HTTP/1.1\r\nHost: x\r\nConnection: X-Secret\r\nX-Secret: 1\r\n\r\n", headHop},
		{"keep-alive", "GET /a HTTP/1.1\r\nHost: x\r\nkeep-alive: timeout=5\r\n\r\n", headHop},
		{"proxy-connection", "GET /a HTTP/1.1\r\nHost: x\r\nPROXY-CONNECTION: keep-alive\r\n\r\n", headHop},
		{"proxy-authorization", "GET /a HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic eA==\r\n\r\n", headHop},
		{"te", "GET /a HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n\r\n", headHop},
		{"trailer", "POST /a HTTP/1.1\r\nHost: x\r\nTrailer: X-T\r\nContent-Length: 0\r\n\r\n", headHop},
		{"upgrade", "GET /a HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\n\r\n", headHop},
		{"http/1.0 closes", "GET /a HTTP/1.0\r\nHost: x\r\n\r\n", headHop},
		{"http/1.0 keep-alive", "GET /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", headHop},
		{"connection close", "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", headHop},
		{"similar names", "GET /a HTTP/1.1\r\nHost: x\r\nX-Upgrade: 1\r\nTrailers: 1\r\nTe-X: 1\r\nX-Forwarded-Form: 1\r\nVia-X: 1\r\nX-Request-Ids: 1\r\n\r\n", 0},
		{"forwarded", "GET /a HTTP/1.1\r\nHost: x\r\nx-forwarded-for: 10.0.0.9\r\n\r\n", headForwarded},
		{"request id", "GET /a HTTP/1.1\r\nHost: x\r\nX-REQUEST-ID: abc\r\n\r\n", headRequestID},
		{"long request id", "GET /a HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + strings.Repeat("r", 41) + "\r\n\r\n", headRequestID},
		{"via", "GET /a HTTP/1.1\r\nHost: x\r\nvia: 1.0 fred\r\n\r\n", headVia},
		{"subset", "GET /a HTTP/1.1\r\nHost: x\r\nx-sextant-subset: version=v1\r\nX-Sextant-Subsets: 1\r\n\r\n", headSubset},
		{"all", "GET /a HTTP/1.1\r\nHost: x\r\nVia: 1.0 a\r\nConnection: keep-alive\r\nX-Forwarded-For: 10.0.0.9\r\nX-Request-Id: r1\r\nX-Sextant-Subset: a=b\r\n\r\n", headUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var always, skipped fasthttp.Request
			for _, r := range []*fasthttp.Request{&always, &skipped} {
				if err := r.Read(bufio.NewReader(strings.NewReader(tc.req))); err != nil {
					t.Fatalf("read %q: %v", tc.req, err)
				}
			}
			got := scanRequestHead(&skipped.Header)
			if got != tc.want {
				t.Errorf("scanRequestHead = %04b, want %04b", got, tc.want)
			}
			// The upstream request prepareRequest makes is the same
			// whether it looks each field up or trusts the scan.
			g := &Gateway{}
			r := &routeRT{spec: &routeSpec{}}
			var a, s fasthttp.RequestCtx
			peer := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}
			a.Init(&always, peer, nil)
			s.Init(&skipped, peer, nil)
			var ida, ids requestID
			g.prepareRequest(&a, r, headUnknown, &ida, nil)
			g.prepareRequest(&s, r, got, &ids, nil)
			// The id kept for the answer is the one sent; a longer one
			// than it keeps is looked up.
			for _, x := range []struct {
				q  *fasthttp.Request
				id *requestID
			}{{&a.Request, &ida}, {&s.Request, &ids}} {
				sent := x.q.Header.Peek("X-Request-Id")
				if got := x.id.of(&x.q.Header); x.id.ok != (len(sent) <= len(x.id.b)) || string(got) != string(sent) {
					t.Errorf("request id %q (kept: %v), sent %q", got, x.id.ok, sent)
				}
			}
			if tc.want&headRequestID == 0 {
				// Each made its own id: 32 hex digits.
				for _, q := range []*fasthttp.Request{&a.Request, &s.Request} {
					if id := q.Header.Peek("X-Request-Id"); len(id) != 32 {
						t.Errorf("made request id %q, want 32 hex digits", id)
					}
					q.Header.SetCanonical(nameRequestID, []byte("made"))
				}
			}
			if a, s := a.Request.String(), s.Request.String(); a != s {
				t.Errorf("looked up:\n%q\nscanned:\n%q", a, s)
			}
		})
	}
	// A request built, not parsed, has no raw block: each is looked up.
	var built fasthttp.Request
	built.Header.Set("Keep-Alive", "timeout=5")
	if got := scanRequestHead(&built.Header); got != headUnknown {
		t.Errorf("a built request: scanRequestHead = %04b, want all", got)
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
	// A browser's request: Connection: keep-alive, nothing repeated.
	var browser fasthttp.Request
	const braw = "GET / HTTP/1.1\r\nHost: shop.example\r\nConnection: keep-alive\r\nUser-Agent: Mozilla/5.0\r\nAccept: text/html\r\nAccept-Encoding: gzip, deflate, br\r\nAccept-Language: en-US\r\nCookie: a=1\r\n\r\n"
	if err := browser.Read(bufio.NewReader(strings.NewReader(braw))); err != nil {
		b.Fatal(err)
	}
	var scratch fasthttp.RequestHeader
	b.Run("browser", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			browser.Header.CopyTo(&scratch)
			dropHopHeaders(&scratch)
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if scanRequestHead(&req.Header) != 0 {
				b.Fatal("a hop header in wrk's request")
			}
		}
	})
}

// An answer's hop-by-hop fields go whatever their case, and the fields
// left keep their values' order (read as roundTrip reads an answer: names
// as written).
func TestDropAnswerHopHeaders(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		want       []string // the fields left, in order, but for those apart (Date...)
		close      bool
	}{
		{"lower case", "connection: keep-alive, X-Hop\r\nkeep-alive: timeout=5\r\nx-hop: 1\r\nX-Keep: 1\r\n",
			[]string{"X-Keep: 1"}, false},
		{"repeated fields keep their order", "Connection: keep-alive\r\nVary: A\r\nLink: <a>\r\nVary: B\r\nLink: <b>\r\nVary: C\r\n",
			[]string{"Vary: A", "Vary: B", "Vary: C", "Link: <a>", "Link: <b>"}, false},
		{"cookies and date", "Date: Sun, 29 Nov 2026 10:00:00 GMT\r\nSet-Cookie: a=1\r\nConnection: keep-alive\r\nSet-Cookie: b=2\r\nProxy-Authenticate: Basic\r\n",
			[]string{"Set-Cookie: a=1", "Set-Cookie: b=2"}, false},
		{"close", "Connection: close\r\nX-A: 1\r\nX-A: 2\r\n", []string{"X-A: 1", "X-A: 2"}, false},
		{"upgrade and te", "Upgrade: h2c\r\nTE: trailers\r\nX-A: 1\r\n", []string{"X-A: 1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h fasthttp.ResponseHeader
			h.DisableNormalizing()
			h.SetNoDefaultContentType(true)
			if err := h.Read(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\n" + tc.head + "Content-Length: 0\r\n\r\n"))); err != nil {
				t.Fatal(err)
			}
			date := string(h.Peek("Date"))
			if !hasHopHeader(&h) {
				t.Fatal("hasHopHeader = false")
			}
			dropAnswerHopHeaders(&h)
			var got []string
			for _, line := range strings.Split(h.String(), "\r\n")[1:] {
				k, _, _ := strings.Cut(line, ":")
				if line == "" || k == "Date" || k == "Content-Length" {
					continue
				}
				// Repeated fields may move after the others: compare each
				// name's values in order, and the set of lines.
				got = append(got, line)
			}
			for _, name := range []string{"Vary", "Link", "Set-Cookie", "X-A", "X-Keep"} {
				if a, b := only(got, name), only(tc.want, name); strings.Join(a, "|") != strings.Join(b, "|") {
					t.Errorf("%s: %q, want %q (all: %q)", name, a, b, got)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("fields %q, want %q", got, tc.want)
			}
			if h.ConnectionClose() != tc.close {
				t.Errorf("ConnectionClose %v", h.ConnectionClose())
			}
			if d := string(h.Peek("Date")); date != "" && d != date {
				t.Errorf("Date %q, was %q", d, date)
			}
		})
	}
}

// only returns the lines of fields named name, in order.
func only(lines []string, name string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, name+":") {
			out = append(out, l)
		}
	}
	return out
}

// A request's hop-by-hop fields go and the fields it repeats keep their
// values' order (fasthttp's Del swapped them).
func TestDropHopHeadersKeepsOrder(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		want       map[string][]string // field -> values in order; nil: gone
	}{
		{"keep-alive and two lists",
			"Connection: keep-alive\r\nX-Forwarded-For: 10.0.0.1\r\nAccept: a\r\nX-Forwarded-For: 10.0.0.2\r\nAccept: b\r\nX-Forwarded-For: 10.0.0.3\r\n",
			map[string][]string{"X-Forwarded-For": {"10.0.0.1", "10.0.0.2", "10.0.0.3"}, "Accept": {"a", "b"}, "Connection": nil}},
		{"lower case, a named hop field repeated",
			"x-a: 1\r\nconnection: X-Secret\r\nx-secret: s1\r\nX-A: 2\r\nX-Secret: s2\r\nkeep-alive: 5\r\n",
			map[string][]string{"X-A": {"1", "2"}, "X-Secret": nil, "Keep-Alive": nil}},
		{"cookies stay as sent", "Cookie: a=1;b=2\r\nTE: trailers\r\nX-B: 1\r\nX-B: 2\r\n",
			map[string][]string{"X-B": {"1", "2"}, "Cookie": {"a=1;b=2"}, "Te": nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req fasthttp.Request
			if err := req.Read(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: x\r\n" + tc.head + "\r\n"))); err != nil {
				t.Fatal(err)
			}
			dropHopHeaders(&req.Header)
			for k, want := range tc.want {
				var got []string
				for _, v := range req.Header.PeekAll(k) {
					got = append(got, string(v))
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: %q, want %q\n%s", k, got, want, req.Header.String())
				}
			}
		})
	}
}

// Several X-Forwarded-For fields become one, the client after the last
// proxy's address; the other repeated fields keep their order.
func TestForwardedForFields(t *testing.T) {
	for _, tc := range []struct{ name, head, want string }{
		{"one", "X-Forwarded-For: 10.0.0.1\r\n", "10.0.0.1, 10.1.2.3"},
		{"two lines", "x-forwarded-for: 10.0.0.1\r\nAccept: a\r\nX-Forwarded-For: 10.0.0.2, 10.0.0.3\r\nAccept: b\r\n", "10.0.0.1, 10.0.0.2, 10.0.0.3, 10.1.2.3"},
		{"with a hop field", "Connection: keep-alive\r\nX-Forwarded-For: 10.0.0.1\r\nAccept: a\r\nX-Forwarded-For: 10.0.0.2\r\nAccept: b\r\n", "10.0.0.1, 10.0.0.2, 10.1.2.3"},
		{"none", "Accept: a\r\nAccept: b\r\n", "10.1.2.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req fasthttp.Request
			if err := req.Read(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: x\r\n" + tc.head + "\r\n"))); err != nil {
				t.Fatal(err)
			}
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}, nil)
			(&Gateway{}).prepareRequest(&ctx, &routeRT{spec: &routeSpec{}}, scanRequestHead(&ctx.Request.Header), nil, nil)
			var xff []string
			for _, v := range ctx.Request.Header.PeekAll("X-Forwarded-For") {
				xff = append(xff, string(v))
			}
			if len(xff) != 1 || xff[0] != tc.want {
				t.Errorf("X-Forwarded-For %q, want one field %q\n%s", xff, tc.want, ctx.Request.Header.String())
			}
			var accept []string
			for _, v := range ctx.Request.Header.PeekAll("Accept") {
				accept = append(accept, string(v))
			}
			if strings.Contains(tc.head, "Accept: a") && !slices.Equal(accept, []string{"a", "b"}) {
				t.Errorf("Accept %q, want [a b] in order", accept)
			}
		})
	}
}

// BenchmarkPrepareH2 is prepareRequest and the answer's X-Request-Id for
// h2load's HTTP/2 request (its head built field by field: no raw block to
// scan). "unknown" looks each edited field up, as every HTTP/2 call did
// before h2sStream.fields; "noted" trusts the fields the server noted, and
// the answer takes the id kept.
func BenchmarkPrepareH2(b *testing.B) {
	g := &Gateway{}
	r := &routeRT{spec: &routeSpec{}}
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}, nil)
	for _, tc := range []struct {
		name string
		head requestHead
		keep bool
	}{{"unknown", headUnknown, false}, {"noted", 0, true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx.Request.Reset()
				ctx.Response.Reset()
				h := &ctx.Request.Header
				h.SetMethod("GET")
				h.SetRequestURI("/")
				h.SetHost("127.0.0.1:8080")
				h.Add("user-agent", "h2load nghttp2/1.52.0")
				h.Add("accept", "*/*")
				var id requestID
				p := &id
				if !tc.keep {
					p = nil
				}
				g.prepareRequest(&ctx, r, tc.head, p, nil)
				ctx.Response.Header.SetCanonical(nameRequestID, id.of(h))
			}
		})
	}
}
