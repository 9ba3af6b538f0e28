package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
)

// h2cEchoServer serves h2c: /echo sends the request body back with a
// trailer holding its sha256, /hold answers its headers and then waits for
// the client to go away, /small answers 1 KiB.
func h2cEchoServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	small := bytes.Repeat([]byte("x"), 1024)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(http.StatusOK)
			h := sha256.New()
			_, _ = io.Copy(io.MultiWriter(w, h), r.Body)
			w.Header().Set("X-Sum", hex.EncodeToString(h.Sum(nil)[:8]))
		case "/hold":
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
		default:
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(small)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func newTestH2Client(addr string) *h2Client {
	return &h2Client{scheme: "http", idle: time.Minute, dial: func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}}
}

// TestH2ClientRoundTrip sends bodies larger than both flow-control
// windows both ways at once, reads trailers, and cancels calls mid-answer:
// every stream slot comes back.
func TestH2ClientRoundTrip(t *testing.T) {
	addr := h2cEchoServer(t)
	cl := newTestH2Client(addr)
	defer cl.CloseIdleConnections()

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := bytes.Repeat([]byte{byte('a' + i)}, 3<<20+i) // past 64 KiB and 1 MiB windows
			req, _ := http.NewRequestWithContext(context.Background(), "POST", "http://"+addr+"/echo", bytes.NewReader(body))
			res, err := cl.RoundTrip(req)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			got, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("call %d: echoed %d bytes (want %d), err %v", i, len(got), len(body), err)
				return
			}
			sum := sha256.Sum256(body)
			if res.Trailer.Get("X-Sum") != hex.EncodeToString(sum[:8]) {
				t.Errorf("call %d: trailer X-Sum %q, want the body's sum", i, res.Trailer.Get("X-Sum"))
			}
		}()
	}
	wg.Wait()

	// A call given up on mid-answer resets its stream.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/hold", nil)
	res, err := cl.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(res.Body); !errors.Is(err, context.Canceled) {
		t.Fatalf("read of a cancelled call: %v, want context.Canceled", err)
	}
	res.Body.Close()

	// An expired deadline before the answer is the context's error.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/echo", &blockingReader{done: ctx.Done()})
	req.ContentLength = -1
	if res, err := cl.RoundTrip(req); err == nil {
		// The echo answers its headers at once; the body read ends with
		// the deadline.
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("read past the deadline: %v, want context.DeadlineExceeded", err)
		}
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past the deadline: %v", err)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		cl.mu.Lock()
		active := 0
		for _, cc := range cl.conns {
			cc.mu.Lock()
			active += cc.active + len(cc.streams)
			cc.mu.Unlock()
		}
		n := len(cl.conns)
		cl.mu.Unlock()
		if active == 0 && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d streams still taken on %d connections, want 0 on 1", active, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestH2ClientConnRefused: a failed dial is the dialer's error (a dial
// OpError: connect_failure).
func TestH2ClientConnRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cl := newTestH2Client(addr)
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	_, err = cl.RoundTrip(req)
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("error %v, want a dial error", err)
	}
	if _, reason := classify(err, 0); reason != reasonConnect {
		t.Fatalf("classified %q, want %q", reason, reasonConnect)
	}
}

type blockingReader struct{ done <-chan struct{} }

func (r *blockingReader) Read([]byte) (int, error) { <-r.done; return 0, io.ErrUnexpectedEOF }

// BenchmarkH2Client is a 1 KiB answer over one h2c connection, through the
// gateway's frame client and through net/http's transport as the gateway
// used it before.
func BenchmarkH2Client(b *testing.B) {
	addr := h2cEchoServer(b)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, HTTP2: h2Config(), DisableCompression: true}
	defer tr.CloseIdleConnections()
	cl := newTestH2Client(addr)
	defer cl.CloseIdleConnections()
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"frames", cl}, {"transport", tr}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 2048)
				for pb.Next() {
					req, _ := http.NewRequest("POST", "http://"+addr+"/small", strings.NewReader("ping"))
					res, err := tc.rt.RoundTrip(req)
					if err != nil {
						b.Error(err)
						return
					}
					for {
						if _, err := res.Body.Read(buf); err != nil {
							break
						}
					}
					res.Body.Close()
				}
			})
		})
	}
}

// refusingH2Server serves h2c by frames: every stream is refused, by
// RST_STREAM REFUSED_STREAM (goaway false) or by a GOAWAY whose last
// stream is 0 (goaway true).
func refusingH2Server(t *testing.T, goaway bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				preface := make([]byte, len(http2.ClientPreface))
				if _, err := io.ReadFull(c, preface); err != nil {
					return
				}
				fr := http2.NewFramer(c, c)
				if fr.WriteSettings() != nil {
					return
				}
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							_ = fr.WriteSettingsAck()
						}
					case *http2.HeadersFrame:
						if goaway {
							_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
						} else {
							_ = fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestH2ClientRefusedStream: a stream refused by REFUSED_STREAM or by a
// GOAWAY that does not take it fails with errRefusedStream (the endpoint
// did not process it), which the refused-stream retry condition accepts
// and another reset does not.
func TestH2ClientRefusedStream(t *testing.T) {
	rs := &retrySpec{defined: true, num: 1, on: retryRefusedStream}
	for _, goaway := range []bool{false, true} {
		addr := refusingH2Server(t, goaway)
		cl := newTestH2Client(addr)
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		_, err := cl.RoundTrip(req)
		cl.CloseIdleConnections()
		if !errors.Is(err, errRefusedStream) {
			t.Fatalf("goaway %v: error %v, want a refused stream", goaway, err)
		}
		_, reason := classify(err, 0)
		if !rs.retriable(reason, 0, -1, err) {
			t.Fatalf("goaway %v: %v (%s) not retriable under refused-stream", goaway, err, reason)
		}
	}
	if rs.retriable(reasonReset, 0, -1, io.ErrUnexpectedEOF) {
		t.Fatal("another reset retriable under refused-stream")
	}
}

// wholeBytes is a request body that says it is all in (wholeBody) and
// counts the reads made of it.
type wholeBytes struct {
	r     *bytes.Reader
	p     []byte
	reads int
}

func (b *wholeBytes) whole() ([]byte, bool)      { return b.p, true }
func (b *wholeBytes) Read(p []byte) (int, error) { b.reads++; return b.r.Read(p) }
func (b *wholeBytes) Close() error               { return nil }

// TestH2ClientWholeBody: a body that is all in goes with the call's
// headers, unread, when the windows and one frame take it; a larger one
// is read and sent by frames as any other. Both are echoed whole.
func TestH2ClientWholeBody(t *testing.T) {
	addr := h2cEchoServer(t)
	cl := newTestH2Client(addr)
	defer cl.CloseIdleConnections()
	for _, tc := range []struct {
		size   int
		inline bool
	}{{0, true}, {1024, true}, {2 << 20, false}} { // the last is past the server's window and frame size
		p := bytes.Repeat([]byte("w"), tc.size)
		body := &wholeBytes{r: bytes.NewReader(p), p: p}
		var h fasthttp.RequestHeader
		h.SetMethod("POST")
		h.SetRequestURI("/echo")
		h.SetHost(addr)
		res, err := cl.roundTripFast(context.Background(), time.Time{}, &h, false, int64(tc.size), body)
		if err != nil {
			t.Fatalf("%d bytes: %v", tc.size, err)
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("%d bytes: echoed %d, err %v", tc.size, len(got), err)
		}
		if read := body.reads > 0; read == tc.inline {
			t.Fatalf("%d bytes: %d reads of the body, want it sent with the headers: %v", tc.size, body.reads, tc.inline)
		}
	}
}

// TestReplayWholeBody: a request body that came whole to h2Server is taken
// by an attempt at once (replayReader.whole), kept for the next attempt,
// and read by a reader of either attempt as it came; one larger than the
// retry buffer is not taken, and is read as it comes.
func TestReplayWholeBody(t *testing.T) {
	type result struct {
		whole, first, again []byte
		ok                  bool
	}
	results := make(chan result, 1)
	const limit = 4096
	addr := serveFrameH2(t, func(w http.ResponseWriter, r *http.Request) {
		b := &replayBody{src: r.Body, limit: limit}
		var res result
		// The DATA frame may follow the handler's start: wait for it.
		st := (*h2sStream)(r.Body.(*h2sBody))
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			st.sc.mu.Lock()
			done := st.remoteDone
			st.sc.mu.Unlock()
			if done {
				break
			}
		}
		a := b.attempt()
		res.whole, res.ok = a.(wholeBody).whole()
		res.whole = bytes.Clone(res.whole)
		res.first, _ = io.ReadAll(a)
		res.again, _ = io.ReadAll(b.attempt())
		results <- res
		w.WriteHeader(http.StatusNoContent)
	})
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	for _, size := range []int{1, 1000, limit, limit + 1} {
		p := bytes.Repeat([]byte{'r'}, size)
		res, err := client.Post("http://"+addr+"/", "application/octet-stream", bytes.NewReader(p))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got := <-results
		if want := size <= limit; got.ok != want || (got.ok && !bytes.Equal(got.whole, p)) {
			t.Fatalf("%d bytes: whole %d bytes, ok %v; want ok %v", size, len(got.whole), got.ok, want)
		}
		if !bytes.Equal(got.first, p) {
			t.Fatalf("%d bytes: the attempt read %d", size, len(got.first))
		}
		if size <= limit && !bytes.Equal(got.again, p) {
			t.Fatalf("%d bytes: the next attempt read %d", size, len(got.again))
		}
	}
}
