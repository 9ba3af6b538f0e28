package gateway

import (
	"bufio"
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestScanPassHead: the answers passHead takes, what it reads of them and
// the lines it leaves out; and those it leaves to fasthttp's parser.
func TestScanPassHead(t *testing.T) {
	for _, tc := range []struct {
		head     string
		isHead   bool
		status   int
		cl       int
		close    bool
		server   bool
		grpc     string
		bodyless bool
		dropped  []string
	}{
		{head: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", status: 200, cl: 5},
		{head: "HTTP/1.1 200\r\nContent-Length:0\r\n\r\n", status: 200, cl: 0},
		{head: "HTTP/1.1 503 Service Unavailable\r\ncontent-length:  12 \t\r\nServer: up\r\nGrpc-Status: 14\r\n\r\n", status: 503, cl: 12, server: true, grpc: "14"},
		{head: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", status: 200, cl: 1, close: true},
		{head: "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 1\r\n\r\n", status: 200, cl: 1,
			dropped: []string{"Connection: Keep-Alive\r\n", "Keep-Alive: timeout=5\r\n"}},
		{head: "HTTP/1.1 200 OK\r\nConnection: close\r\nVia: 1.1 other\r\nX-A: 1\r\nx-request-id: up\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n", status: 200, cl: 2, close: true,
			dropped: []string{"Connection: close\r\n", "Via: 1.1 other\r\n", "x-request-id: up\r\n", "Upgrade: h2c\r\n"}},
		{head: "HTTP/1.1 204 No Content\r\nDate: x\r\n\r\n", status: 204, cl: -1, bodyless: true},
		{head: "HTTP/1.1 304 Not Modified\r\nContent-Length: 100000\r\n\r\n", status: 304, cl: 100000, bodyless: true},
		{head: "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", isHead: true, status: 200, cl: 100000, bodyless: true},
		{head: "HTTP/1.1 200 OK\r\n\r\n", isHead: true, status: 200, cl: -1, bodyless: true},
	} {
		var p passHead
		b := []byte(tc.head + "body after")
		n := scanPassHead(&p, b, tc.isHead)
		if n != len(tc.head) {
			t.Errorf("%q: scanned %d bytes, want %d", tc.head, n, len(tc.head))
			continue
		}
		p.buf = b[:n]
		var dropped []string
		for _, d := range p.drop[:p.ndrop] {
			dropped = append(dropped, string(p.buf[d.from:d.to]))
		}
		if p.status != tc.status || p.cl != tc.cl || p.close != tc.close || p.server != tc.server || string(p.grpcStatus()) != tc.grpc ||
			p.bodyless != tc.bodyless || !slices.Equal(dropped, tc.dropped) {
			t.Errorf("%q: status %d cl %d close %v server %v grpc %q bodyless %v dropped %q; want %d %d %v %v %q %v %q", tc.head,
				p.status, p.cl, p.close, p.server, p.grpcStatus(), p.bodyless, dropped,
				tc.status, tc.cl, tc.close, tc.server, tc.grpc, tc.bodyless, tc.dropped)
		}
	}
	for _, head := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n",                          // not whole yet
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",             // chunked
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",               // ends with the connection
		"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n",                 // streamed
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", // twice
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n",
		"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",                               // bare LF
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A: a\nb\r\n\r\n",            // LF in a value
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n folded\r\n\r\n",              // obs-fold
		"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n",                        // space before the colon
		"HTTP/1.1 200 OK\r\nConnection: X-Secret\r\nContent-Length: 0\r\n\r\n", // names a field to drop
		"HTTP/1.1 200 OK\r\nX-A: \x00\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", maxPassHead) + "\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n" + strings.Repeat("Via: x\r\n", 9) + "Content-Length: 0\r\n\r\n", // more lines to drop than kept
	} {
		var p passHead
		if n := scanPassHead(&p, []byte(head), false); n != 0 {
			t.Errorf("%q: taken (%d bytes), want it left to fasthttp", head, n)
		}
	}
}

// TestPassHeadWrite: a head goes out with HTTP/1.1, the endpoint's fields
// in their order but the hop-by-hop ones, Via and X-Request-Id, then the
// gateway's; built in the writer's buffer or, when that is nearly full,
// beside it.
func TestPassHeadWrite(t *testing.T) {
	in := "HTTP/1.0 201 Made\r\nX-Z: 1\r\nConnection: keep-alive\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\nVia: 1.0 up\r\nContent-Type: a/b\r\nX-Request-Id: theirs\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 5\r\n\r\n"
	for _, tc := range []struct {
		closing, keepAlive bool
		server, conn       string
		fill               int
	}{
		{false, false, "sextant", "", 0},
		{true, false, "sextant", "Connection: close\r\n", 0},
		{false, true, "", "Connection: keep-alive\r\n", 4000},
	} {
		var p passHead
		br := bufio.NewReaderSize(strings.NewReader(in+"hello"), 8192)
		br.Peek(1)
		if !p.take(br, false) {
			t.Fatalf("%q not taken", in)
		}
		p.id = []byte("ours")
		var out bytes.Buffer
		w := bufio.NewWriterSize(&out, 4096)
		w.WriteString(strings.Repeat("p", tc.fill))
		var scratch []byte
		if err := p.writeHead(w, &scratch, tc.closing, tc.keepAlive, tc.server); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		want := "HTTP/1.1 201 Made\r\nX-Z: 1\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\nContent-Type: a/b\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 5\r\n" +
			"Via: " + viaValue + "\r\nX-Request-Id: ours\r\n" + tc.conn
		if tc.server != "" {
			want += "Server: " + tc.server + "\r\n"
		}
		want += "\r\n"
		if got := out.String()[tc.fill:]; got != want {
			t.Errorf("closing %v keepAlive %v fill %d:\n got %q\nwant %q", tc.closing, tc.keepAlive, tc.fill, got, want)
		}
		if rest, _ := br.Peek(5); string(rest) != "hello" {
			t.Errorf("the reader holds %q after the head, want the body", rest)
		}
	}
}

// FuzzPassHead holds scanPassHead to fasthttp's parser: a head it takes is
// one fasthttp reads with the same status, Content-Length and closing, and
// what writeHead makes of it fasthttp reads as the fields fasthttp's path
// would send (the endpoint's but the hop-by-hop ones, Via and X-Request-Id;
// then the gateway's).
func FuzzPassHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nVia: x\r\nX-Request-Id: y\r\nKeep-Alive: 1\r\n\r\n",
		"HTTP/1.1 404 \r\nServer: s\r\nGrpc-Status: 5\r\nSet-Cookie: a=b\r\nContent-Type: t\r\nContent-Length:3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: \xff\x80 v \t\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, isHead bool) {
		var p passHead
		n := scanPassHead(&p, b, isHead)
		if n == 0 {
			return
		}
		p.buf = b[:n]
		var h fasthttp.ResponseHeader
		h.DisableNormalizing()
		h.SetNoDefaultContentType(true)
		if err := h.Read(bufio.NewReader(bytes.NewReader(b[:n]))); err != nil {
			t.Fatalf("taken, but fasthttp fails to read it: %v\n%q", err, b[:n])
		}
		if h.StatusCode() != p.status {
			t.Fatalf("status %d, fasthttp's %d\n%q", p.status, h.StatusCode(), b[:n])
		}
		if cl := h.ContentLength(); p.cl >= 0 && cl != p.cl || p.cl < 0 && cl >= 0 {
			t.Fatalf("Content-Length %d, fasthttp's %d\n%q", p.cl, cl, b[:n])
		}
		// (Without a length fasthttp guesses a body to the connection's
		// end; a bodyless answer has none, and its connection is kept.)
		if h.ConnectionClose() && !p.close && p.cl >= 0 {
			t.Fatalf("fasthttp closes after it, the scan does not\n%q", b[:n])
		}
		if g := h.Peek("Grpc-Status"); !bytes.Equal(g, p.grpcStatus()) {
			t.Fatalf("Grpc-Status %q, fasthttp's %q\n%q", p.grpcStatus(), g, b[:n])
		}
		// The fields fasthttp's path sends: the endpoint's, less those
		// the gateway takes out.
		var want []string
		for k, v := range h.All() {
			if isHopName(k) || bytes.EqualFold(k, nameVia) || bytes.EqualFold(k, nameRequestID) {
				continue
			}
			want = append(want, strings.ToLower(string(k))+": "+string(v))
		}
		want = append(want, "via: "+viaValue, "x-request-id: id")
		if !p.server {
			want = append(want, "server: gw")
		}
		p.id = []byte("id")
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		var scratch []byte
		if err := p.writeHead(w, &scratch, false, false, "gw"); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		written := bytes.Clone(out.Bytes())
		var got fasthttp.ResponseHeader
		got.DisableNormalizing()
		got.SetNoDefaultContentType(true)
		if err := got.Read(bufio.NewReader(&out)); err != nil {
			t.Fatalf("fasthttp fails to read the head written: %v\n%q", err, out.Bytes())
		}
		// Without a length (a bodyless answer's), fasthttp reads a body to
		// the connection's end and takes the connection to close: its
		// guess, not a field.
		guess := p.cl < 0 && got.ConnectionClose()
		var have []string
		for k, v := range got.All() {
			if guess && bytes.EqualFold(k, nameConnection) {
				continue
			}
			have = append(have, strings.ToLower(string(k))+": "+string(v))
		}
		slices.Sort(want)
		slices.Sort(have)
		if !slices.Equal(have, want) || got.StatusCode() != p.status || !got.IsHTTP11() || got.ConnectionClose() && !guess {
			t.Fatalf("written %q\nfields %q\nwant   %q", written, have, want)
		}
	})
}

// BenchmarkAnswerPass is an endpoint's answer head read and written on to
// the client: by passHead, and as fasthttp's path does it (its parser, the
// gateway's edits, answerWriter), 1 KiB of body each.
func BenchmarkAnswerPass(b *testing.B) {
	in := []byte("HTTP/1.1 200 OK\r\nServer: fasthttp\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\nContent-Type: application/octet-stream\r\nContent-Length: 1024\r\n\r\n" + strings.Repeat("x", 1024))
	r := bytes.NewReader(in)
	br := bufio.NewReaderSize(r, 4096)
	w := bufio.NewWriterSize(nil, 4096)
	var resp fasthttp.Response
	b.Run("pass", func(b *testing.B) {
		var p passHead
		var a answerWriter
		b.ReportAllocs()
		for b.Loop() {
			r.Reset(in)
			br.Reset(r)
			w.Reset(discardWriter{})
			br.Peek(1)
			if !p.take(br, false) {
				b.Fatal("not taken")
			}
			resp.Header.SetContentLength(p.cl)
			if err := resp.ReadBody(br, 0); err != nil {
				b.Fatal(err)
			}
			p.id = append(p.id[:0], "0123456789abcdef"...)
			if err := a.writePass(w, &resp, &p, false, false, "sextant"); err != nil {
				b.Fatal(err)
			}
			resp.Reset()
		}
	})
	b.Run("fasthttp", func(b *testing.B) {
		var a answerWriter
		b.ReportAllocs()
		for b.Loop() {
			r.Reset(in)
			br.Reset(r)
			w.Reset(discardWriter{})
			resp.Header.DisableNormalizing()
			resp.Header.SetNoDefaultContentType(true)
			if err := resp.Header.Read(br); err != nil {
				b.Fatal(err)
			}
			if err := resp.ReadBody(br, 0); err != nil {
				b.Fatal(err)
			}
			if hasHopHeader(&resp.Header) {
				dropAnswerHopHeaders(&resp.Header)
			}
			resp.Header.SetCanonical(nameVia, viaBytes)
			resp.Header.SetCanonical(nameRequestID, []byte("0123456789abcdef"))
			if len(resp.Header.Server()) == 0 {
				resp.Header.SetServer("sextant")
			}
			if err := a.write(w, &resp); err != nil {
				b.Fatal(err)
			}
			resp.Reset()
		}
	})
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
