package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestConnUnderWrappers: the HTTP/1.1 loop writes under lfConn and
// prefixConn at once, and reads under them only once they pass reads on:
// the guard saw the first head end without a bare LF, and the sniffed
// bytes are all read.
func TestConnUnderWrappers(t *testing.T) {
	inner, peer := net.Pipe()
	defer inner.Close()
	defer peer.Close()
	go func() { peer.Write([]byte("Host: a\r\n\r\n")) }()

	c := &lfConn{Conn: &prefixConn{Conn: inner, prefix: []byte("GET / HTTP/1.1\r\n")}}
	if w := writesOf(c); w != inner {
		t.Fatalf("writesOf = %T, want the connection under the wrappers", w)
	}
	if w := writesOf(inner); w != inner {
		t.Fatalf("writesOf(a bare connection) = %T, want itself", w)
	}
	if r := readsOf(c); r != nil {
		t.Fatal("readsOf before the first head was read: not nil")
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf) // the sniffed bytes
	if err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if r := readsOf(c); r != nil {
		t.Fatal("readsOf before the head's end: not nil")
	}
	if n, err = c.Read(buf); err != nil || string(buf[:n]) != "Host: a\r\n\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if r := readsOf(c); r != inner {
		t.Fatalf("readsOf after the first head = %v, want the connection under the wrappers", r)
	}

	// The head ended within the sniffed bytes, some of them still unread.
	left := &lfConn{Conn: &prefixConn{Conn: inner, prefix: []byte("GET / HTTP/1.1\r\n\r\nGET")}}
	if n, err = left.Read(buf[:18]); err != nil || n != 18 || !left.lf.done {
		t.Fatalf("read %d, %v, guard done %v", n, err, left.lf.done)
	}
	if r := readsOf(left); r != nil {
		t.Fatal("readsOf with sniffed bytes unread: not nil")
	}

	// A bare LF: the guard fails every read from then on, so it stays.
	bad := &lfConn{Conn: &prefixConn{Conn: inner, prefix: []byte("GET / HTTP/1.1\nHost: a\n\n")}}
	if _, err = bad.Read(buf); err != nil {
		t.Fatalf("read: %v", err)
	}
	if _, err = bad.Read(buf); err != errBareLF {
		t.Fatalf("read after a bare LF: %v, want errBareLF", err)
	}
	if r := readsOf(bad); r != nil {
		t.Fatal("readsOf after a bare LF: not nil")
	}
	if r := readsOf(inner); r != nil {
		t.Fatal("readsOf(a bare connection): not nil")
	}
}

// wrappedListener hands out its connections as the gateway's plaintext
// listener does (server.go): nbConn under a prefixConn under an lfConn, so
// that past the first request they are served inside one raw read
// (fastStep); bare: as accepted, served by the usual loop alone.
type wrappedListener struct {
	net.Listener
	bare bool
}

func (l wrappedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.bare {
		return c, err
	}
	return &lfConn{Conn: &prefixConn{Conn: newNBConn(c)}}, nil
}

// TestH1IdleTimeout: a connection that carried requests and then sends
// nothing is closed once the server's idle timeout has passed since its
// last request's start, whether its requests were served inside one raw
// read or by the usual loop.
func TestH1IdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	for _, bare := range []bool{false, true} {
		s := newH1Server(func(ctx *fasthttp.RequestCtx, _ *passHead) { ctx.SetBodyString("ok") },
			func(ctx *fasthttp.RequestCtx, err error) { ctx.SetStatusCode(fasthttp.StatusBadRequest) }, "t", 0, idle)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(wrappedListener{ln, bare})
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		var last time.Time
		for i := range 3 { // the first by the usual loop, the next inside one raw read (not bare)
			last = time.Now()
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("bare %v, request %d: %v", bare, i, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("bare %v: after the idle timeout read %d bytes, %v; want the connection closed", bare, n, err)
		}
		if took := time.Since(last); took < idle || took > idle+2*time.Second {
			t.Errorf("bare %v: closed %v after the last request, idle timeout %v", bare, took, idle)
		}
		c.Close()
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.Shutdown(ctx)
		cancel()
	}
}
