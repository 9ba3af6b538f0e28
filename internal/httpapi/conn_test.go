package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair is a joinConn and the other end of its loopback connection.
func tcpPair(t testing.TB) (*joinConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := JoinWrites(&http.Server{}, ln).Accept()
	if err != nil {
		t.Fatal(err)
	}
	jc, ok := c.(*joinConn)
	if !ok {
		t.Fatalf("JoinWrites' listener accepted a %T, want *joinConn", c)
	}
	t.Cleanup(func() { jc.Close(); peer.Close() })
	return jc, peer
}

// nothingArrives fails unless peer receives nothing for a moment.
func nothingArrives(t *testing.T, peer net.Conn) {
	t.Helper()
	peer.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [1]byte
	n, err := peer.Read(b[:])
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a held write reached the peer: read %d bytes, %v", n, err)
	}
}

func readN(t *testing.T, peer net.Conn, n int) []byte {
	t.Helper()
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(peer, b); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return b
}

func TestJoinConnHoldsOneWrite(t *testing.T) {
	jc, peer := tcpPair(t)
	first := bytes.Repeat([]byte("a"), 4096)
	second := bytes.Repeat([]byte("b"), 30000)

	jc.hold()
	if n, err := jc.Write(first); n != len(first) || err != nil {
		t.Fatalf("held write: %d, %v", n, err)
	}
	first[0] = 'x' // net/http refills its buffer once Write returns
	nothingArrives(t, peer)
	if n, err := jc.Write(second); n != len(second) || err != nil {
		t.Fatalf("joined write: %d, %v (want %d of the second write's bytes)", n, err, len(second))
	}
	jc.release()
	got := readN(t, peer, 4096+30000)
	if got[0] != 'a' || !bytes.Equal(got[1:4096], first[1:]) || !bytes.Equal(got[4096:], second) {
		t.Fatal("the joined write did not send the held bytes as written, then the next")
	}

	// Released: writes go out as they come.
	if _, err := jc.Write([]byte("c")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, peer, 1); got[0] != 'c' {
		t.Fatalf("got %q", got)
	}
}

func TestJoinConnReleaseSendsWhatIsHeld(t *testing.T) {
	jc, peer := tcpPair(t)
	jc.hold()
	jc.Write([]byte("held"))
	nothingArrives(t, peer)
	jc.release()
	if got := readN(t, peer, 4); string(got) != "held" {
		t.Fatalf("got %q", got)
	}
	// A hold that catches no write holds nothing later.
	jc.hold()
	jc.release()
	jc.Write([]byte("next"))
	if got := readN(t, peer, 4); string(got) != "next" {
		t.Fatalf("got %q", got)
	}
}

func TestJoinConnFailedReleaseSticks(t *testing.T) {
	jc, peer := tcpPair(t)
	jc.hold()
	jc.Write([]byte("held"))
	jc.SetWriteDeadline(time.Now().Add(-time.Second))
	jc.release()
	if jc.err == nil {
		t.Fatal("release past the write deadline reported no error")
	}
	jc.SetWriteDeadline(time.Time{})
	if _, err := jc.Write([]byte("later")); err == nil {
		t.Fatal("a write after the held bytes were lost succeeded: the peer would read a gap")
	}
	peer.Close()
}

// TestAnswersThroughListener sends answers of every size around net/http's
// 4 KiB buffer through writeBody, writeJSON and streamJSON on keep-alive
// connections, and HEADs of the same routes: every body arrives whole and
// nothing waits for a write that does not come.
func TestAnswersThroughListener(t *testing.T) {
	mux := http.NewServeMux()
	sizes := []int{0, 1, 2047, 2048, 4000, 4095, 4096, 4097, 4300, 8191, 8192, 8193, 36000, 70000, 1 << 20}
	body := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(i%26)
		}
		return b
	}
	var served, reached atomic.Int32 // requests, and those whose handler reached a joinConn
	wrap := func(h func(w http.ResponseWriter, n int)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			served.Add(1)
			jc := joinOf(r)
			if jc != nil {
				reached.Add(1)
			}
			h(&statusWriter{ResponseWriter: w, code: http.StatusOK, conn: jc}, n)
		}
	}
	mux.Handle("GET /body", wrap(func(w http.ResponseWriter, n int) { writeBody(w, 1, body(n)) }))
	mux.Handle("GET /json", wrap(func(w http.ResponseWriter, n int) {
		writeJSON(w, 1, func(b []byte) []byte { return append(b, body(n)...) })
	}))
	mux.Handle("GET /stream", wrap(func(w http.ResponseWriter, n int) {
		streamJSON(w, 1, func(bw *bufio.Writer) { bw.Write(body(n)) })
	}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = JoinWrites(srv.Config, srv.Listener)
	srv.Start()
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/body", "/json", "/stream"} {
		for _, n := range sizes {
			want := body(n)
			if path != "/body" {
				want = append(want, '\n')
			}
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				req, _ := http.NewRequest(method, srv.URL+path+"?n="+strconv.Itoa(n), nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s %s n=%d: %v", method, path, n, err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("%s %s n=%d: reading: %v", method, path, n, err)
				}
				if method == http.MethodHead {
					got = nil
					want = nil
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s %s n=%d: body of %d bytes, want %d", method, path, n, len(got), len(want))
				}
			}
		}
	}
	if served.Load() == 0 || reached.Load() != served.Load() {
		t.Fatalf("%d of %d handlers reached a joinConn: the joined path was not (all) tested", reached.Load(), served.Load())
	}
}

// BenchmarkAnswer36K is one 36 KB answer (the query bench's) per request on
// one keep-alive loopback connection, read whole by a minimal client;
// "joined" serves through JoinWrites, "split" as net/http does alone. The
// figure includes the client's share of the machine.
func BenchmarkAnswer36K(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 36000)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeBody(&statusWriter{ResponseWriter: w, code: http.StatusOK, conn: joinOf(r)}, 1, body)
	})
	for _, joined := range []bool{false, true} {
		name := map[bool]string{false: "split", true: "joined"}[joined]
		b.Run(name, func(b *testing.B) {
			srv := httptest.NewUnstartedServer(h)
			if joined {
				srv.Listener = JoinWrites(srv.Config, srv.Listener)
			}
			srv.Start()
			defer srv.Close()
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReaderSize(c, 64<<10)
			req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			buf := make([]byte, len(body))
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if err := readAnswer(br, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// readAnswer reads one answer whose body is len(buf) bytes.
func readAnswer(br *bufio.Reader, buf []byte) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
	}
	if _, err := io.ReadFull(br, buf); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return nil
}

// JoinWrites keeps a ConnContext the server already had.
func TestJoinWritesKeepsConnContext(t *testing.T) {
	type key struct{}
	var got atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store([2]bool{r.Context().Value(key{}) == "mine", joinOf(r) != nil})
	}))
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, key{}, "mine")
	}
	srv.Listener = JoinWrites(srv.Config, srv.Listener)
	srv.Start()
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v, _ := got.Load().([2]bool); v != [2]bool{true, true} {
		t.Fatalf("handler saw the server's own context value %v, a joinConn %v; want both", v[0], v[1])
	}
}
