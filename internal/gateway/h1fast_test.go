package gateway_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// After its first request, a plaintext connection's requests are served
// inside one raw read of its socket (h1server.go, fastStep), which waits
// for more only after a read found less than it asked for. These tests
// send what that loop must hand back to the usual one, or wait through,
// on a connection past its first request.

// warm sends a first request on c, so that the next ones take fastStep.
func warm(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	if _, err := io.WriteString(c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, body := readAnswer(t, br, "GET"); resp.StatusCode != 200 || body != "GET /first " {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
}

// dialWarmBare connects to a gateway of serveBare and sends a first request
// (answered whatever it is), so that the next ones take fastStep.
func dialWarmBare(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c, br
}

// writeInPieces writes each piece with a pause before the next, so that
// each arrives by itself.
func writeInPieces(t *testing.T, c net.Conn, pieces ...string) {
	t.Helper()
	for i, p := range pieces {
		if i > 0 {
			time.Sleep(30 * time.Millisecond)
		}
		if _, err := io.WriteString(c, p); err != nil {
			t.Fatal(err)
		}
	}
}

// TestH1AfterTheFirstRequest: heads and bodies that arrive in pieces, a
// client awaiting 100 Continue, an empty line before a request, and
// pipelined requests (a chunked body among them) are each answered in
// order on a connection past its first request.
func TestH1AfterTheFirstRequest(t *testing.T) {
	g := startEchoGateway(t)
	c, br := dialGateway(t, g)
	warm(t, c, br)
	afterTheFirstRequest(t, c, br)
}

// TestH1AfterTheFirstRequestOverTLS is TestH1AfterTheFirstRequest on the
// TLS port, where the tls.Conn reads the socket inside the raw read
// (fastStepTLS): with each TLS record whole in one read, and with each
// record arriving in two (a record begun waits in the tls.Conn).
func TestH1AfterTheFirstRequestOverTLS(t *testing.T) {
	g, ca := startEchoTLSGateway(t, gateway.Options{})
	for _, split := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole records", true: "records in two"}[split], func(t *testing.T) {
			c, br := dialTLSGateway(t, g, ca, split)
			warm(t, c, br)
			afterTheFirstRequest(t, c, br)
		})
	}
}

// TestH1LaterStalledAndOversizedOverTLS is TestH1LaterStalledAndOversized
// on the TLS port.
func TestH1LaterStalledAndOversizedOverTLS(t *testing.T) {
	g, ca := startEchoTLSGateway(t, gateway.Options{RequestReadTimeout: 300 * time.Millisecond})
	laterStalledAndOversized(t, "a.test", func() (net.Conn, *bufio.Reader) {
		c, br := dialTLSGateway(t, g, ca, false)
		warm(t, c, br)
		return c, br
	})
}

// laterStalledAndOversized sends a stalled head and one too large on
// connections dial opens past their first request, to a gateway whose
// read timeout is 300 ms.
func laterStalledAndOversized(t *testing.T, host string, dial func() (net.Conn, *bufio.Reader)) {
	t.Helper()
	for _, tc := range []struct{ name, raw, status string }{
		{"stalled", "GET /x HTTP/1.1\r\nHost: " + host + "\r\n", "408"},
		{"oversized", "GET / HTTP/1.1\r\nHost: " + host + "\r\nX-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n", "431"},
	} {
		c, br := dial()
		start := time.Now()
		if _, err := io.WriteString(c, tc.raw); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(br)
		if !strings.HasPrefix(string(b), "HTTP/1.1 "+tc.status+" ") || !strings.Contains(string(b), "Connection: close") {
			t.Errorf("%s: %q, want %s and Connection: close", tc.name, b, tc.status)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s: answered after %v, want about the 300 ms read timeout", tc.name, took)
		}
	}
}

// startEchoTLSGateway serves startEchoGateway's upstream on a gateway's
// TLS port (a.test, ca's certificate).
func startEchoTLSGateway(t *testing.T, opts gateway.Options) (*gw, *pki) {
	t.Helper()
	ca := newPKI(t)
	u := startUpstream(t, "up", echoMethodPath)
	cp := startControlPlane(t, "")
	g := startGatewayOpts(t, cp.addr, true, opts)
	cp.set(twoHosts(t, ca, g.tlsPort(), u)...)
	waitFor(t, "a.test over TLS", func() bool {
		resp, err := g.tlsClient(ca.pool, false).Get("https://a.test/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return g, ca
}

// dialTLSGateway opens an HTTP/1.1 connection to g's TLS port; split:
// each of its writes reaches the socket in two pieces, a pause between.
func dialTLSGateway(t *testing.T, g *gw, ca *pki, split bool) (net.Conn, *bufio.Reader) {
	t.Helper()
	raw, err := net.Dial("tcp", g.tls)
	if err != nil {
		t.Fatal(err)
	}
	var under net.Conn = raw
	if split {
		under = splitConn{raw}
	}
	c := tls.Client(under, &tls.Config{ServerName: "a.test", RootCAs: ca.pool, NextProtos: []string{"http/1.1"}})
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// splitConn writes each write in two pieces, 20 ms apart.
type splitConn struct{ net.Conn }

func (c splitConn) Write(p []byte) (int, error) {
	if len(p) < 2 {
		return c.Conn.Write(p)
	}
	n, err := c.Conn.Write(p[:len(p)/2])
	if err != nil {
		return n, err
	}
	time.Sleep(20 * time.Millisecond)
	m, err := c.Conn.Write(p[len(p)/2:])
	return n + m, err
}

// afterTheFirstRequest sends c, past its first request, what the raw
// read's loop must serve or hand back to the usual one.
func afterTheFirstRequest(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	for _, tc := range []struct {
		name   string
		pieces []string
		want   []string // answers' bodies; a HEAD's is ""
	}{
		{"a head in pieces", []string{"GET /sp", "lit HTTP/1.1\r\nHo", "st: x\r\n", "\r\n"}, []string{"GET /split "}},
		{"a body after its head", []string{"POST /late HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n", "he", "llo"}, []string{"POST /late hello"}},
		{"a chunked body in pieces", []string{"POST /ch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", "2\r\nde\r\n", "0\r\n\r\n"}, []string{"POST /ch abcde"}},
		{"an empty line first", []string{"\r\nGET /crlf HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"GET /crlf "}},
		{"an empty line, then the head later", []string{"\r\n\r\nGET /crlf2 HTTP/1.1\r\n", "Host: x\r\n\r\n"}, []string{"GET /crlf2 "}},
		{"a body in the same write", []string{"POST /whole HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"}, []string{"POST /whole abc"}},
		{"pipelined", []string{"GET /p1 HTTP/1.1\r\nHost: x\r\n\r\n" +
			"POST /p2 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi" +
			"POST /p3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n" +
			"HEAD /p4 HTTP/1.1\r\nHost: x\r\n\r\nGET /p5 HTTP/1.1\r\nHo", "st: x\r\n\r\n"},
			[]string{"GET /p1 ", "POST /p2 hi", "POST /p3 z", "", "GET /p5 "}},
	} {
		writeInPieces(t, c, tc.pieces...)
		for _, want := range tc.want {
			method, _, _ := strings.Cut(want, " ")
			if want == "" {
				method = "HEAD"
			}
			if resp, body := readAnswer(t, br, method); resp.StatusCode != 200 || body != want {
				t.Fatalf("%s: %d %q, want 200 %q", tc.name, resp.StatusCode, body, want)
			}
		}
	}
	// 100 Continue, then the body.
	writeInPieces(t, c, "POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	if line, err := br.ReadString('\n'); err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q (%v), want 100 Continue", line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("after 100 Continue: %q", blank)
	}
	writeInPieces(t, c, "body")
	if resp, body := readAnswer(t, br, "POST"); resp.StatusCode != 200 || body != "POST /e body" {
		t.Fatalf("after 100 Continue: %d %q", resp.StatusCode, body)
	}
	// Still served whole after all that.
	writeInPieces(t, c, "GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := readAnswer(t, br, "GET"); resp.StatusCode != 200 || body != "GET /last " {
		t.Fatalf("last: %d %q", resp.StatusCode, body)
	}
}

// TestH1LaterStalledAndOversized: past the first request, a head that
// stops arriving still gets 408 once the read timeout passes since its
// first byte, and a head larger than the read buffer 431.
func TestH1LaterStalledAndOversized(t *testing.T) {
	addr := serveBare(t, gateway.Options{RequestReadTimeout: 300 * time.Millisecond})
	laterStalledAndOversized(t, "x", func() (net.Conn, *bufio.Reader) { return dialWarmBare(t, addr) })
}

// TestWebSocketAfterTheFirstRequest: a connection that carried a plain
// request upgrades to a WebSocket (the tunnel takes the connection from
// the loop that served it inside its raw read), and messages pass.
func TestWebSocketAfterTheFirstRequest(t *testing.T) {
	g := startWSGateway(t, "websocket")
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, NetDial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		if err != nil {
			return nil, err
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /plain HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return nil, err
		}
		// Read to the answer's end byte by byte: nothing past it is taken.
		var got []byte
		one := make([]byte, 1)
		for !bytes.HasSuffix(got, []byte("plain ws1")) {
			if _, err := c.Read(one); err != nil {
				return nil, err
			}
			got = append(got, one[0])
		}
		_ = c.SetDeadline(time.Time{})
		return c, nil
	}}
	c, resp, err := d.Dial("ws"+strings.TrimPrefix(g.url, "http")+"/chat", nil)
	if err != nil {
		t.Fatalf("dial through the gateway: %v (%v)", err, status(resp))
	}
	defer c.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Upstream") != "ws1" {
		t.Fatalf("handshake answer %d %v, want the endpoint's 101", resp.StatusCode, resp.Header)
	}
	for i, msg := range [][]byte{[]byte("hello"), bytes.Repeat([]byte("x"), 200<<10)} {
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if _, got, err := c.ReadMessage(); err != nil || !bytes.Equal(got, append([]byte("ws1:"), msg...)) {
			t.Fatalf("message %d: echo of %d bytes, err %v", i, len(got), err)
		}
	}
}

// TestH1LargeAnswerAfterTheFirstRequest: answers that outgrow the
// socket's buffer while the client does not read (a raw write that stops
// short, the rest written as the connection writes) arrive whole, one
// streamed from its endpoint and one buffered, in order.
func TestH1LargeAnswerAfterTheFirstRequest(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	u := startUpstream(t, "big", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write(big)
		case "/mid":
			w.Write(big[:200<<10])
		default:
			io.WriteString(w, "GET "+r.URL.Path+" ")
		}
	})
	g := startGatewayTo(t, u, "GET / ")
	c, br := dialGateway(t, g)
	warm(t, c, br)
	writeInPieces(t, c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /mid HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(300 * time.Millisecond) // the gateway's writes fill the socket meanwhile
	for _, want := range [][]byte{big, big[:200<<10]} {
		if resp, body := readAnswer(t, br, "GET"); resp.StatusCode != 200 || body != string(want) {
			t.Fatalf("%d: %d bytes, want %d", resp.StatusCode, len(body), len(want))
		}
	}
}

// FuzzH1LaterRequests: whatever bytes follow a connection's first
// request, written in two pieces, a last request closing the connection
// after them is answered or the connection closes, within the read
// timeout: the loop never waits on bytes it holds (fastStep's waits) nor
// past the timeout.
func FuzzH1LaterRequests(f *testing.F) {
	for _, s := range []string{
		"GET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /b HTTP/1.1\r\nHo",
		"\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\nabc",
		"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /b HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
		"GET /b HTTP/1.1\nHost: x\n\n",
		"GET /b HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 8300) + "\r\n\r\n",
		"\x00\xff garbage\r\n\r\n",
	} {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	addr := serveBare(f, gateway.Options{RequestReadTimeout: 200 * time.Millisecond})
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		c, br := dialWarmBare(t, addr)
		k := min(int(cut), len(in))
		start := time.Now()
		c.Write(in[:k])
		time.Sleep(5 * time.Millisecond)
		c.Write(in[k:])
		c.Write([]byte("GET /z HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
		_, err := io.Copy(io.Discard, br)
		if took := time.Since(start); isTimeout(err) || took > 3*time.Second {
			t.Fatalf("%q (cut at %d): the connection neither answered its last request nor closed in %v (%v)", in, k, took, err)
		}
	})
}
