package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzH1Body: a chunked request body as the HTTP/1.1 server decodes it
// never panics nor reads past the body's end, and where it decodes one,
// it agrees with net/http's chunked reader.
func FuzzH1Body(f *testing.F) {
	for _, s := range []string{
		"3\r\nabc\r\n0\r\n\r\n",
		"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n",
		"zz\r\nabc\r\n0\r\n\r\n",
		"3\r\nabcdef\r\n0\r\n\r\n",
		"3\nabc\r\n0\r\n\r\n",
		"ffffffffffffffff\r\n",
		"0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"1\r\na\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		const next = "NEXT"
		br := bufio.NewReaderSize(bytes.NewReader(append(append([]byte(nil), in...), next...)), 4096)
		var b h1Body
		b.start(br, -1)
		got, err := io.ReadAll(io.LimitReader(&b, 1<<20))
		if err != nil {
			if !b.failed {
				t.Fatalf("%q: error %v without the body marked failed", in, err)
			}
			return
		}
		if !b.eof {
			return // over the limit
		}
		// What follows the body is left for the next request.
		rest, _ := io.ReadAll(br)
		if !strings.HasSuffix(string(rest), next) {
			t.Fatalf("%q: the body read into what follows it: left %q", in, rest)
		}
		want, werr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(in)))
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q: decoded %q, net/http %q", in, got, want)
		}
	})
}

// FuzzPlainHost: a Host checkTarget passes without fasthttp's URI parser
// is one that parser reads without error.
func FuzzPlainHost(f *testing.F) {
	for _, s := range []string{"example.com", "a:80", "a:", "a:1:2", "[::1]:80", "a]b", "%zz", "A-b_c~d.e:65535", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !plainHost([]byte(host)) {
			return
		}
		var u fasthttp.URI
		if err := u.Parse([]byte(host), []byte("/x")); err != nil {
			t.Fatalf("plainHost(%q) but fasthttp: %v", host, err)
		}
	})
}
