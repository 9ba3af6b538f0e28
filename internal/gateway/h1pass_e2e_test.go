package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestAnswerHeadPassedAsItCame: through the gateway, an endpoint's answer
// keeps its fields in their order and as written (fasthttp's writer puts
// Server, Date, Content-Type and Content-Length first and would drop the
// extra spaces), less the hop-by-hop ones, its Via and its X-Request-Id,
// with the gateway's added; a HEAD answer's length stays, without a body,
// and the client's connection stays open whatever the endpoint's says.
// The request goes to the endpoint as it came too, its fields in the
// client's order (fasthttp's writer puts Host and User-Agent first), less
// its hop-by-hop ones, with the gateway's after them.
func TestAnswerHeadPassedAsItCame(t *testing.T) {
	const answer = "HTTP/1.1 200 Fine\r\nX-First: 1\r\nconnection: close\r\nSet-Cookie: a=1\r\nVia: 1.0 inner\r\nKeep-Alive: timeout=5\r\n" +
		"content-type:   text/x \r\nX-Request-Id: endpoints\r\nServer: up\r\nSet-Cookie: b=2\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\nContent-Length: 2\r\n\r\n"
	heads := make(chan string, 3)
	url := gatewayToRaw(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		b, _ := br.Peek(1)
		b, _ = br.Peek(br.Buffered())
		if i := strings.Index(string(b), "\r\n\r\n"); i >= 0 {
			heads <- string(b[:i+4])
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		out := answer + "ok"
		if req.Method == http.MethodHead {
			out = strings.Replace(answer, "Content-Length: 2", "Content-Length: 123456", 1)
		}
		_, _ = c.Write([]byte(out)) // and closes, as it said
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, method := range []string{"GET", "HEAD", "GET"} { // one connection
		if _, err := c.Write([]byte(method + " /p?q=1 HTTP/1.1\r\nX-B: 1\r\nHost: a.test\r\nUser-Agent: t\r\nX-Request-Id: mine\r\nConnection: keep-alive\r\nVia: 1.0 outer\r\n\r\n")); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		var head []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("call %d: %v after %q", i, err, head)
			}
			if line == "\r\n" {
				break
			}
			head = append(head, line)
		}
		cl, body := "2", "ok"
		if method == "HEAD" {
			cl, body = "123456", ""
		}
		want := []string{"HTTP/1.1 200 Fine\r\n", "X-First: 1\r\n", "Set-Cookie: a=1\r\n", "content-type:   text/x \r\n", "Server: up\r\n", "Set-Cookie: b=2\r\n",
			"Date: Mon, 02 Jan 2006 15:04:05 GMT\r\n", "Content-Length: " + cl + "\r\n", "Via: 1.1 sextant\r\n", "X-Request-Id: mine\r\n"}
		if !slices.Equal(head, want) {
			t.Fatalf("call %d (%s): head\n%q\nwant\n%q", i, method, head, want)
		}
		got := make([]byte, len(body))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != body {
			t.Fatalf("call %d: body %q, %v", i, got, err)
		}
		sent := <-heads
		wantSent := method + " /p?q=1 HTTP/1.1\r\nX-B: 1\r\nHost: a.test\r\nUser-Agent: t\r\nX-Request-Id: mine\r\n" +
			"X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nVia: 1.0 outer, 1.1 sextant\r\n\r\n"
		if sent != wantSent {
			t.Fatalf("call %d: the endpoint got\n%q\nwant\n%q", i, sent, wantSent)
		}
	}
}
