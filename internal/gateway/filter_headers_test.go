package gateway

import (
	"bufio"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// headerNames are names as routes may give them: lower case as Istio
// sends them, already canonical, shouting, with underscores or digits, and
// names fasthttp keeps apart from the other headers.
var headerNames = []string{"x-tenant", "X-Tenant", "X-TENANT", "x_under_score", "x-b3-traceid", "x--double",
	"content-type", "user-agent", "cookie", "connection", "x-served-by"}

// readRequest is a request header as the gateway's server parses it
// (names normalized).
func readRequest(t *testing.T, head string) *fasthttp.RequestHeader {
	t.Helper()
	h := new(fasthttp.RequestHeader)
	if err := h.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestReqHeaderAsFasthttp: a request's header changes by prebuilt names
// (reqHeader) leave the header exactly as fasthttp's calls by string did,
// for every kind of name, present in another case or absent.
func TestReqHeaderAsFasthttp(t *testing.T) {
	const head = "GET / HTTP/1.1\r\nHost: a\r\nx-tenant: client\r\nCONTENT-TYPE: text/plain\r\nX_UNDER_SCORE: u\r\n" +
		"Cookie: a=b\r\nX-B3-TraceId: 1\r\nX--Double: d\r\n\r\n"
	for _, name := range headerNames {
		n := newHeaderName(name)
		for _, op := range []struct {
			name   string
			byName func(h *fasthttp.RequestHeader)
			built  func(h reqHeader)
		}{
			{"set", func(h *fasthttp.RequestHeader) { h.Set(name, "v1") }, func(h reqHeader) { h.set(&n, []byte("v1")) }},
			{"add", func(h *fasthttp.RequestHeader) { h.Add(name, "v2") }, func(h reqHeader) { h.add(&n, []byte("v2")) }},
			{"del", func(h *fasthttp.RequestHeader) { h.Del(name) }, func(h reqHeader) { h.del(&n) }},
		} {
			want, got := readRequest(t, head), readRequest(t, head)
			if want.Peek(name) != nil != (reqHeader{got}.has(&n)) {
				t.Fatalf("%s: has %v, Peek %q", name, reqHeader{got}.has(&n), want.Peek(name))
			}
			op.byName(want)
			op.built(reqHeader{got})
			if w, g := want.String(), got.String(); w != g {
				t.Fatalf("%s %s: got\n%s\nwant (fasthttp by name)\n%s", op.name, name, g, w)
			}
		}
	}
}

// TestStdHeaderAsNetHTTP: an HTTP/2 answer's header changes by prebuilt
// names (stdHeader) are http.Header's own by string.
func TestStdHeaderAsNetHTTP(t *testing.T) {
	for _, name := range headerNames {
		n := newHeaderName(name)
		for _, op := range []struct {
			name   string
			byName func(h http.Header)
			built  func(h stdHeader)
		}{
			{"set", func(h http.Header) { h.Set(name, "v1") }, func(h stdHeader) { h.set(&n, []byte("v1")) }},
			{"add", func(h http.Header) { h.Add(name, "v2") }, func(h stdHeader) { h.add(&n, []byte("v2")) }},
			{"del", func(h http.Header) { h.Del(name) }, func(h stdHeader) { h.del(&n) }},
		} {
			start := func() http.Header {
				h := http.Header{}
				h.Add(name, "upstream")
				h.Add("X-Other", "o")
				return h
			}
			want, got := start(), start()
			if len(want.Values(name)) > 0 != stdHeader(got).has(&n) {
				t.Fatalf("%s: has %v", name, stdHeader(got).has(&n))
			}
			op.byName(want)
			op.built(stdHeader(got))
			if len(want) != len(got) || !slices.Equal(want.Values(name), got.Values(name)) || got.Get("X-Other") != "o" {
				t.Fatalf("%s %s: got %v, want %v", op.name, name, got, want)
			}
		}
	}
}

// TestAnswerHeaderAnyCase: on an upstream's answer (names kept as sent),
// a route's changes find a header whatever its case, an empty value
// included: ADD_IF_ABSENT adds nothing to it, OVERWRITE_IF_EXISTS
// replaces it, a removal removes every copy; what is added keeps the
// configured name.
func TestAnswerHeaderAnyCase(t *testing.T) {
	var resp fasthttp.ResponseHeader
	resp.DisableNormalizing()
	resp.SetNoDefaultContentType(true)
	if err := resp.Read(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-KEPT:\r\n" +
		"x-Set-If: old\r\nX-GONE: 1\r\nx-gone: 2\r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	ops := headerOps{remove: []headerName{newHeaderName("x-gone")}, add: []headerOp{
		newHeaderOp("x-kept", "route", headerAddIfAbsent),
		newHeaderOp("x-set-if", "new", headerOverwriteIfSet),
		newHeaderOp("x-absent-if", "no", headerOverwriteIfSet),
		newHeaderOp("x-added", "yes", headerAddIfAbsent),
	}}
	ops.apply(answerHeader(&resp))
	got := map[string][]string{}
	for k, v := range resp.All() {
		got[string(k)] = append(got[string(k)], string(v))
	}
	want := map[string][]string{"Content-Length": {"0"}, "X-KEPT": {""}, "x-set-if": {"new"}, "x-added": {"yes"}}
	if len(got) != len(want) {
		t.Fatalf("answer headers %v, want %v", got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Fatalf("answer headers %v, want %v", got, want)
		}
	}
}

// TestCORSActualRequestHeaders: an actual request's Origin is read as the
// server keeps it (the client may send it in any case), and a policy
// whose matcher takes "*" allows any origin on actual requests as on
// preflights; the answer gets the allow headers once, replacing any the
// upstream sent.
func TestCORSActualRequestHeaders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		origins []headerMatch
		origin  string
		allowed bool
	}{
		{"exact", []headerMatch{{kind: strExact, value: "https://a.example"}}, "https://a.example", true},
		{"exact other", []headerMatch{{kind: strExact, value: "https://a.example"}}, "https://b.example", false},
		{"suffix", []headerMatch{{kind: strSuffix, value: ".example"}}, "https://b.example", true},
		{"star", []headerMatch{{kind: strExact, value: "https://a.example"}, {kind: strExact, value: "*"}}, "https://any.where", true},
	} {
		f := &corsFilter{origins: tc.origins, expose: []byte("x-e"), credentials: true, forwardUnmatched: true}
		for i := range f.origins {
			f.anyOrigin = f.anyOrigin || matchString(&f.origins[i], []byte("*"))
		}
		var ctx fasthttp.RequestCtx
		readRequest(t, "GET / HTTP/1.1\r\nHost: a\r\norigin: "+tc.origin+"\r\n\r\n").CopyTo(&ctx.Request.Header)
		if f.request(&ctx, 0) {
			t.Fatalf("%s: an actual request was answered", tc.name)
		}
		var resp fasthttp.ResponseHeader
		resp.DisableNormalizing()
		resp.Add("access-control-allow-origin", "https://upstream")
		f.response(&ctx, answerHeader(&resp), 0)
		n := 0
		for k, v := range resp.All() {
			if strings.EqualFold(string(k), "Access-Control-Allow-Origin") {
				n++
				if string(v) != tc.origin && tc.allowed {
					t.Fatalf("%s: Access-Control-Allow-Origin %q", tc.name, v)
				}
			}
		}
		creds, expose := resp.Peek("Access-Control-Allow-Credentials"), resp.Peek("Access-Control-Expose-Headers")
		if n != 1 || tc.allowed != (string(creds) == "true" && string(expose) == "x-e") {
			t.Fatalf("%s: allowed %v, answer\n%s", tc.name, tc.allowed, resp.String())
		}
	}
}
