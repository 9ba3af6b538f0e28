package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFloorForwards: the go-floor and go-epoll candidates (both waits) carry
// keep-alive requests, bodies included, to the bench's upstream and their
// answers back whole, over one client connection; a pipeline of answers
// larger than the client's socket takes waits for the client (go-epoll's
// pending output); a chunked request ends the connection.
func TestFloorForwards(t *testing.T) {
	for name, serve := range map[string]func(context.Context, net.Listener, string) error{
		"go-floor": serveFloor,
		"go-epoll": func(ctx context.Context, ln net.Listener, up string) error {
			return serveEpollFloor(ctx, ln, up, false)
		},
		"go-epoll-block": func(ctx context.Context, ln net.Listener, up string) error {
			return serveEpollFloor(ctx, ln, up, true)
		},
	} {
		t.Run(name, func(t *testing.T) { testFloorForwards(t, serve) })
	}
}

func testFloorForwards(t *testing.T, serve func(context.Context, net.Listener, string) error) {
	ctx, cancel := context.WithCancel(context.Background())
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- ServeUpstream(ctx, upLn, 1024) }()
	go func() { done <- serve(ctx, ln, upLn.Addr().String()) }()
	defer func() {
		cancel()
		for range 2 {
			select {
			case err := <-done:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the candidate or the upstream did not stop with its context")
			}
		}
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	call := func(req string) *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := range 3 {
		resp := call("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || len(b) != 1024 {
			t.Fatalf("GET %d: %d, %d bytes", i, resp.StatusCode, len(b))
		}
	}
	resp := call("POST /up HTTP/1.1\r\nHost: x\r\ncontent-length: 5\r\n\r\nhello")
	if b, _ := io.ReadAll(resp.Body); string(b) != "n=5" {
		t.Fatalf("POST: %q", b)
	}

	// 6,000 pipelined requests, their answers (6.8 MB, more than the
	// client's receive buffer and the proxy's send buffer hold before the
	// client reads: 4 MB at most) read only after a pause: the proxy's
	// writes to the client stop taking bytes meanwhile.
	const pipelined = 6000
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c, strings.Repeat("GET / HTTP/1.1\r\nHost: x\r\n\r\n", pipelined))
		wrote <- err
	}()
	time.Sleep(300 * time.Millisecond)
	for i := range pipelined {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined answer %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || len(b) != 1024 {
			t.Fatalf("pipelined answer %d: %d, %d bytes", i, resp.StatusCode, len(b))
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}

	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after a chunked request: %v, want the connection closed", err)
	}
}

func TestFloorBodySize(t *testing.T) {
	for head, want := range map[string]int{
		"GET / HTTP/1.1\r\nHost: x\r\n":                          0,
		"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n":            1024,
		"HTTP/1.1 200 OK\r\nx: y\r\ncontent-length:  7 \r\n":     7,
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n":      -1,
		"POST / HTTP/1.1\r\nContent-Length: -3\r\n":              -1,
		"POST / HTTP/1.1\r\nContent-Length: 12a\r\n":             -1,
		"GET / HTTP/1.1\r\nNot-Content-Length: 4\r\nHost: x\r\n": 0,
	} {
		n, err := floorBodySize([]byte(head))
		if want < 0 && err == nil || want >= 0 && (err != nil || n != want) {
			t.Errorf("%q: %d, %v; want %d", strings.TrimSpace(head), n, err, want)
		}
	}
}
