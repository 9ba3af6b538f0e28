package gateway

import (
	"bufio"
	"bytes"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestUpConnFullSocket: a request larger than the socket takes at once goes
// out whole, the rest after the write that found the socket full, and the
// answer is read after it; the request's buffer goes back to its pool.
func TestUpConnFullSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	small := func(c syscall.RawConn, opt int) {
		if err := c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, 1024) }); err != nil {
			t.Fatal(err)
		}
	}
	lraw, _ := ln.(*net.TCPListener).SyscallConn()
	small(lraw, syscall.SO_RCVBUF) // the accepted socket's window: small
	body := bytes.Repeat([]byte("0123456789abcdef"), upConnMaxBody/16)
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		time.Sleep(200 * time.Millisecond) // the client's write meets a full socket
		var req fasthttp.Request
		if err := req.Read(bufio.NewReader(c)); err != nil {
			got <- nil
			return
		}
		got <- append([]byte(nil), req.Body()...)
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	craw, _ := c.(*net.TCPConn).SyscallConn()
	small(craw, syscall.SO_SNDBUF)
	uc, ok := newUpConn(c).(*upConn)
	if !ok {
		t.Fatal("not an upConn")
	}
	defer uc.Close()
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/up")
	req.Header.SetHost("up")
	req.SetBody(body)
	if err := uc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := uc.sendAwait(&req, nil); err != nil {
		t.Fatalf("sendAwait: %v", err)
	}
	if uc.req != nil || uc.out != nil {
		t.Fatal("the request's buffer was kept after it was sent")
	}
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(uc)); err != nil || string(resp.Body()) != "ok" {
		t.Fatalf("answer %q, %v", resp.Body(), err)
	}
	if b := <-got; !bytes.Equal(b, body) {
		t.Fatalf("the endpoint read %d bytes of body, want the %d sent", len(b), len(body))
	}
}
