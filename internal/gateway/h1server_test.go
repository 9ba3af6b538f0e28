package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// The gateway's HTTP/1.1 server (h1server.go), spoken to over a raw
// connection: what a client sees of its framing.

const upstreamDate = "Mon, 02 Jan 2006 15:04:05 GMT"

// startEchoGateway starts a gateway whose every path goes to an upstream
// answering "METHOD PATH BODY" with a fixed Date.
func startEchoGateway(t *testing.T) *gw {
	t.Helper()
	u := startUpstream(t, "echo", echoMethodPath)
	return startGatewayTo(t, u, "GET / ")
}

// echoMethodPath answers "METHOD PATH BODY".
func echoMethodPath(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Date", upstreamDate)
	fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
}

func dialGateway(t *testing.T, g *gw) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// readAnswer reads one answer and its body.
func readAnswer(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestH1Pipelined: requests written at once, a sized and a chunked body
// (with a trailer) among them, are answered in order on one connection;
// each answer carries the endpoint's Date once and the gateway's Server.
func TestH1Pipelined(t *testing.T) {
	g := startEchoGateway(t)
	c, br := dialGateway(t, g)
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"+
		"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-T: 1\r\n\r\n"+
		"HEAD /d HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ method, body string }{{"GET", "GET /a "}, {"POST", "POST /b hello"}, {"POST", "POST /c abcde"}, {"HEAD", ""}} {
		resp, body := readAnswer(t, br, want.method)
		if resp.StatusCode != 200 || body != want.body {
			t.Fatalf("%s: %d %q, want 200 %q", want.method, resp.StatusCode, body, want.body)
		}
		if d := resp.Header.Values("Date"); len(d) != 1 || d[0] != upstreamDate {
			t.Errorf("%s: Date %q, want the endpoint's %q once", want.body, d, upstreamDate)
		}
		if s := resp.Header.Get("Server"); s != "sextant" {
			t.Errorf("%s: Server %q, want sextant", want.body, s)
		}
	}
}

// TestH1ExpectContinue: a client that waits for 100 Continue gets it, then
// its answer.
func TestH1ExpectContinue(t *testing.T) {
	g := startEchoGateway(t)
	c, br := dialGateway(t, g)
	if _, err := io.WriteString(c, "POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q (%v), want 100 Continue", line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("after 100 Continue: %q", blank)
	}
	if _, err := io.WriteString(c, "body"); err != nil {
		t.Fatal(err)
	}
	if resp, body := readAnswer(t, br, "POST"); resp.StatusCode != 200 || body != "POST /e body" {
		t.Fatalf("answer %d %q", resp.StatusCode, body)
	}
}

// TestH1UnreadBody: a body the gateway answers without reading (a bad
// subset header) is read past, and the connection serves the next request; one
// declared too long to read past closes the connection after the answer,
// which says so. Its answer, the gateway's own, has no Date.
func TestH1UnreadBody(t *testing.T) {
	g := startEchoGateway(t)
	c, br := dialGateway(t, g)
	if _, err := io.WriteString(c, "POST /u HTTP/1.1\r\nHost: x\r\nX-Sextant-Subset: bad\r\nContent-Length: 10\r\n\r\n0123456789GET /next HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, _ := readAnswer(t, br, "POST")
	if resp.StatusCode != 400 || resp.Close || resp.Header.Get("Date") != "" {
		t.Fatalf("bad subset header: %d close=%v Date %q, want 400, kept, no Date", resp.StatusCode, resp.Close, resp.Header.Get("Date"))
	}
	if resp, body := readAnswer(t, br, "GET"); resp.StatusCode != 200 || body != "GET /next " {
		t.Fatalf("next request: %d %q", resp.StatusCode, body)
	}

	c2, br2 := dialGateway(t, g)
	if _, err := io.WriteString(c2, "POST /u HTTP/1.1\r\nHost: x\r\nX-Sextant-Subset: bad\r\nContent-Length: 1048576\r\n\r\n0123456789"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := readAnswer(t, br2, "POST"); resp.StatusCode != 400 || !resp.Close {
		t.Fatalf("1 MiB unread: %d close=%v, want 400 and Connection: close", resp.StatusCode, resp.Close)
	}
	if n, err := br2.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("after the answer: read %d, %v; want the connection closed", n, err)
	}
}

// TestH1HTTP10: an HTTP/1.0 client that asks to keep its connection is
// told so and served again on it; one that does not is closed.
func TestH1HTTP10(t *testing.T) {
	g := startEchoGateway(t)
	c, br := dialGateway(t, g)
	for i := range 2 {
		if _, err := io.WriteString(c, "GET /k HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, body := readAnswer(t, br, "GET")
		if resp.StatusCode != 200 || body != "GET /k " || !strings.EqualFold(resp.Header.Get("Connection"), "keep-alive") {
			t.Fatalf("call %d: %d %q Connection %q", i, resp.StatusCode, body, resp.Header.Get("Connection"))
		}
	}
	if _, err := io.WriteString(c, "GET /k HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, body := readAnswer(t, br, "GET"); resp.StatusCode != 200 || body != "GET /k " {
		t.Fatalf("without keep-alive: %d %q", resp.StatusCode, body)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("after an HTTP/1.0 answer without keep-alive: read %d, %v; want closed", n, err)
	}
}

// TestH1BadChunks: a chunked body that breaks mid-way gets 400 and the
// connection closes.
func TestH1BadChunks(t *testing.T) {
	g := startEchoGateway(t)
	for _, body := range []string{"zz\r\nabc\r\n0\r\n\r\n", "3\r\nabcdef\r\n0\r\n\r\n", "3\nabc\r\n0\r\n\r\n"} {
		c, br := dialGateway(t, g)
		if _, err := io.WriteString(c, "POST /bad HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+body); err != nil {
			t.Fatal(err)
		}
		resp, msg := readAnswer(t, br, "POST")
		if resp.StatusCode != 400 || !resp.Close {
			t.Errorf("chunks %q: %d close=%v %q, want 400 and closed", body, resp.StatusCode, resp.Close, msg)
		}
	}
}

// TestH1StalledAndOversized: a head that stops arriving gets 408 once the
// read timeout passes, and a head larger than the read buffer gets 431;
// both close the connection. (A connection that sends nothing at all is
// dispatch's, which waits for the bytes that tell HTTP/2 apart.)
func TestH1StalledAndOversized(t *testing.T) {
	addr := serveBare(t, gateway.Options{RequestReadTimeout: 300 * time.Millisecond})
	for _, tc := range []struct{ name, raw, status string }{
		{"stalled", "GET /x HTTP/1.1\r\nHost: x\r\n", "408"},
		{"oversized", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n", "431"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, tc.raw); err != nil {
			t.Fatal(err)
		}
		// To the close; a reset after the answer is the unread rest of
		// the head.
		b, _ := io.ReadAll(c)
		if !strings.HasPrefix(string(b), "HTTP/1.1 "+tc.status+" ") || !strings.Contains(string(b), "Connection: close") {
			t.Errorf("%s: %q, want %s and Connection: close", tc.name, b, tc.status)
		}
	}
}

// TestH1ConnectionPerRequest: clients that close their connection after
// each request (the server's connection state is pooled) each get their
// own answer, whole.
func TestH1ConnectionPerRequest(t *testing.T) {
	g := startEchoGateway(t)
	for i := range 30 {
		c, br := dialGateway(t, g)
		body := strings.Repeat(fmt.Sprint(i), i%7)
		req := fmt.Sprintf("POST /p%d HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", i, len(body), body)
		if i%2 == 1 {
			req = fmt.Sprintf("GET /g%d HTTP/1.1\r\nHost: x\r\nX-Only-%d: 1\r\n\r\n", i, i)
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		method, want := "POST", fmt.Sprintf("POST /p%d %s", i, body)
		if i%2 == 1 {
			method, want = "GET", fmt.Sprintf("GET /g%d ", i)
		}
		if resp, got := readAnswer(t, br, method); resp.StatusCode != 200 || got != want {
			t.Fatalf("connection %d: %d %q, want %q", i, resp.StatusCode, got, want)
		}
		c.Close()
	}
}

// TestH1BadTarget: a request whose Host or target fasthttp's URI parser
// cannot read is refused with 400 and the connection closed, as
// fasthttp's server refused it, before any route sees it.
func TestH1BadTarget(t *testing.T) {
	g := startEchoGateway(t)
	for _, raw := range []string{
		"GET /x HTTP/1.1\r\nHost: [::1\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a:1:2\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a]b\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: %zz\r\n\r\n",
		"GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a\x7fb HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c, br := dialGateway(t, g)
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		resp, body := readAnswer(t, br, "GET")
		if resp.StatusCode != 400 || !resp.Close {
			t.Errorf("%q: %d close=%v %q, want 400 and closed", raw, resp.StatusCode, resp.Close, body)
		}
	}
	// Well-formed: served.
	c, br := dialGateway(t, g)
	if _, err := io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: Example.COM:8080\r\n\r\nGET /v6 HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GET /ok ", "GET /v6 "} {
		if resp, body := readAnswer(t, br, "GET"); resp.StatusCode != 200 || body != want {
			t.Errorf("%s: %d %q", want, resp.StatusCode, body)
		}
	}
}
