package gateway

import (
	"bufio"
	"bytes"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// passReqFields writes raw's request upstream both ways, fasthttp's (the
// parsed head edited by prepareRequest) and passReq's, and returns each
// head's request line and fields (names in lower case, sorted; the
// request id the gateway made set to "made"); ok false when passReq does
// not take the request. tls: the client's connection was TLS.
func passReqFields(t testing.TB, raw string, tls bool) (fast, pass []string, ok bool) {
	t.Helper()
	peer := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}
	var reqs [2]fasthttp.Request
	for i := range reqs {
		if err := reqs[i].Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			return nil, nil, false // fasthttp's server answers it 400
		}
	}
	r := &routeRT{spec: &routeSpec{}}
	g := &Gateway{}
	var a, s fasthttp.RequestCtx
	a.Init(&reqs[0], peer, nil)
	s.Init(&reqs[1], peer, nil)
	head := scanRequestHead(&reqs[1].Header)
	var pr passReq
	if head&headSubset != 0 || !(reqs[1].Header.IsGet() || reqs[1].Header.IsHead()) || !pr.scan(&reqs[1].Header) {
		return nil, nil, false
	}
	if u := reqs[1].Header.RequestURI(); len(u) == 0 || u[0] != '/' {
		return nil, nil, false
	}
	var ida, ids requestID
	g.prepareRequest(&a, r, head, &ida, nil)
	g.prepareRequest(&s, r, head, &ids, &pr)
	if tls {
		// (RequestCtx.Init makes no TLS connection: the proto set as
		// prepareRequest sets it on one.)
		a.Request.Header.SetCanonical(nameForwardedProto, protoHTTPS)
		pr.proto = protoHTTPS
	}
	var fb, pb bytes.Buffer
	w := bufio.NewWriter(&fb)
	if err := a.Request.Write(w); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	w = bufio.NewWriter(&pb)
	if err := pr.write(w, &s.Request.Header); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	return headFields(t, fb.Bytes(), ida), headFields(t, pb.Bytes(), ids), true
}

// headFields reads a request head as an endpoint would (fasthttp's parser,
// names as written) into its request line and sorted fields.
func headFields(t testing.TB, b []byte, id requestID) []string {
	t.Helper()
	var h fasthttp.RequestHeader
	h.DisableNormalizing()
	if err := h.Read(bufio.NewReader(bytes.NewReader(b))); err != nil {
		t.Fatalf("an endpoint cannot read %q: %v", b, err)
	}
	var out []string
	for k, v := range h.All() {
		if bytes.EqualFold(k, nameRequestID) && len(v) == 32 && bytes.Equal(v, id.b[:id.n]) {
			v = []byte("made")
		}
		out = append(out, strings.ToLower(string(k))+": "+string(v))
	}
	slices.Sort(out)
	return append([]string{string(h.Method()) + " " + string(h.RequestURI()) + " " + string(h.Protocol())}, out...)
}

// TestPassReq: a request passReq takes reaches the endpoint with the
// fields fasthttp's path sends (in the client's order, where fasthttp's
// writer puts Host and User-Agent first and re-encodes cookies); those it
// does not take are left to fasthttp.
func TestPassReq(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		tls  bool
		want bool
	}{
		{"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n", false, true},
		{"GET /a?b=c HTTP/1.1\r\nhost: shop.example\r\nCookie: a=1; b=2\r\nX-Request-Id: mine\r\n\r\n", true, true},
		{"HEAD /x HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\nVia: 1.0 a\r\nVia: 1.0 b\r\nX-Forwarded-Proto: gopher\r\n\r\n", false, true},
		{"GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For:\r\nAccept:  spaced  \r\n\r\n", false, true},
		{"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", false, true},
		{"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-A: 1\r\nProxy-Authorization: x\r\n\r\n", false, true}, // hop-by-hop, dropped
		{"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\n\r\n", false, false},                                                      // names a field
		{"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", false, false},
		{"GET / HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\n", false, false},
		{"GET / HTTP/1.1\r\nHost: h\r\nX-Sextant-Subset: v=1\r\n\r\n", false, false},
		{"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n folded\r\n\r\n", false, false},
		{"GET / HTTP/1.1\r\nX-A: 1\r\n\r\n", false, false}, // no Host
		{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", false, false},
		{"GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n", false, false},
		{"GET / HTTP/1.0\r\nHost: h\r\n\r\n", false, false},
	} {
		fast, pass, ok := passReqFields(t, tc.raw, tc.tls)
		if ok != tc.want {
			t.Errorf("%q: taken %v, want %v", tc.raw, ok, tc.want)
			continue
		}
		if ok && !slices.Equal(fast, pass) {
			t.Errorf("%q:\nfasthttp's %q\npassReq's  %q", tc.raw, fast, pass)
		}
	}
}

// TestPassReqHost: a Host the gateway serves the request under (a
// service port's) replaces the client's.
func TestPassReqHost(t *testing.T) {
	var req fasthttp.Request
	if err := req.Header.Read(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nA: 1\r\nHost: client\r\nB: 2\r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	req.Header.SetHost("svc.mesh")
	var pr passReq
	if !pr.scan(&req.Header) {
		t.Fatal("not taken")
	}
	pr.xff, pr.proto, pr.via = []byte("10.0.0.1"), protoHTTP, viaBytes
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	if err := pr.write(w, &req.Header); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	want := "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nHost: svc.mesh\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: http\r\nVia: 1.1 sextant\r\n\r\n"
	if out.String() != want {
		t.Fatalf("wrote %q, want %q", out.String(), want)
	}
}

// FuzzPassReq holds passReq to fasthttp's path: a request it takes reaches
// the endpoint with the same request line and fields.
func FuzzPassReq(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n",
		"GET /a?b=c HTTP/1.1\r\nHost: h\r\nCookie: a=1; b=2\r\nX-Request-Id: mine\r\nVia: x\r\n\r\n",
		"HEAD /x HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\nX-Forwarded-Proto: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nX-A: \xff\t\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive\r\nKeep-Alive: 300\r\nUpgrade: x\r\nTrailer: y\r\n\r\n",
	} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, raw string, tls bool) {
		fast, pass, ok := passReqFields(t, raw, tls)
		if ok && !slices.Equal(fast, pass) {
			t.Fatalf("%q:\nfasthttp's %q\npassReq's  %q", raw, fast, pass)
		}
	})
}

// BenchmarkRequestPass is prepareRequest's edits and the upstream write of
// wrk's request: passReq's, and fasthttp's (SetCanonical, Request.Write).
func BenchmarkRequestPass(b *testing.B) {
	const raw = "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n"
	peer := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5555}
	g := &Gateway{}
	r := &routeRT{spec: &routeSpec{}}
	w := bufio.NewWriterSize(discardWriter{}, 4096)
	for _, pass := range []bool{true, false} {
		name := "fasthttp"
		if pass {
			name = "pass"
		}
		b.Run(name, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			ctx.Init(&fasthttp.Request{}, peer, nil)
			sr := strings.NewReader(raw)
			br := bufio.NewReader(sr)
			var pr passReq
			var id requestID
			b.ReportAllocs()
			for b.Loop() {
				ctx.Request.Reset()
				sr.Reset(raw)
				br.Reset(sr)
				h := &ctx.Request.Header
				if err := h.Read(br); err != nil {
					b.Fatal(err)
				}
				head := scanRequestHead(h)
				var p *passReq
				if pass && pr.scan(h) {
					p = &pr
				}
				g.prepareRequest(&ctx, r, head, &id, p)
				var err error
				if p != nil {
					err = p.write(w, h)
				} else {
					err = ctx.Request.Write(w)
				}
				if err != nil {
					b.Fatal(err)
				}
				w.Flush()
			}
		})
	}
}
