package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// serveFrameH2 serves h on a loopback h2c listener with h2Server, as
// servePlain does (batching writer included), until the test ends.
func serveFrameH2(t testing.TB, h http.HandlerFunc) string {
	t.Helper()
	_, addr := serveFrameH2Server(t, h)
	return addr
}

// serveFrameH2Server is serveFrameH2, with its server.
func serveFrameH2Server(t testing.TB, h http.HandlerFunc) (*h2Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newFrameH2Server(h, time.Minute)
	conns := newConnListener(ln.Addr())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(conns) }()
	go func() {
		_ = acceptLoop(ln, func(c net.Conn) {
			bc := newBatchConn(c)
			bc.start()
			conns.push(bc)
		})
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Close()
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// TestH2ServerH2spec runs h2spec (github.com/summerwind/h2spec, pinned in
// tools/h2spec) against h2Server: every test case must pass. "make test"
// builds it first ($SEXTANT_H2SPEC); without that, the test builds it.
func TestH2ServerH2spec(t *testing.T) {
	bin := os.Getenv("SEXTANT_H2SPEC")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "h2spec")
		build := exec.Command("go", "build", "-C", filepath.Join("..", "..", "tools", "h2spec"), "-o", bin, "github.com/summerwind/h2spec/cmd/h2spec")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building h2spec (tools/h2spec): %v\n%s", err, out)
		}
	} else if _, err := os.Stat(bin); err != nil {
		t.Fatalf("SEXTANT_H2SPEC: %v", err)
	}
	addr := serveFrameH2(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello")
	})
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(bin, "-h", host, "-p", port, "-o", "5", "-j", t.TempDir()+"/report.xml").CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("h2spec: %v", err)
	}
}

// FuzzH2Server feeds a connection of h2Server the preface, an empty
// SETTINGS, then arbitrary bytes (frames, header blocks), with a handler
// that reads the body and answers with a body and trailers: the server
// must neither panic nor hang, and must end the connection when the
// client closes it.
func FuzzH2Server(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, hf := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/x"}, {":authority", "a"}, {"content-length", "3"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, []byte("abc"))
	_ = fr.WritePing(false, [8]byte{1})
	_ = fr.WriteWindowUpdate(0, 1000)
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 4, 8, 0, 0, 0, 0, 1, 0, 0, 0, 0}) // WINDOW_UPDATE of 0 on an idle stream
	s := newFrameH2Server(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		_, _ = w.Write([]byte("answer"))
	}, time.Minute)
	f.Cleanup(func() { _ = s.Shutdown(context.Background()) }) // stops its idle workers
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		sc := newH2sConn(s, server)
		done := make(chan struct{})
		go func() { defer close(done); sc.serve() }()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		var pre bytes.Buffer
		pre.WriteString(http2.ClientPreface)
		_ = http2.NewFramer(&pre, nil).WriteSettings()
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write(append(pre.Bytes(), in...))
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the connection did not end after the client closed it")
		}
	})
}

// TestH2ServerFrames reads the frames h2Server answers with, at the frame
// level: a small body ends with one END_STREAM and nothing after it; a
// body with trailers ends with a HEADERS of them; an answer without a body
// is one HEADERS with END_STREAM; a body the handler left unread is reset
// with NO_ERROR once the handler returns (RFC 9113 8.1); a :path with a
// space or a control byte is reset.
func TestH2ServerFrames(t *testing.T) {
	addr := serveFrameH2(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			_, _ = io.WriteString(w, "hello")
		case "/trailers":
			w.Header().Set("Content-Type", "application/grpc")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "msg")
			w.(http.Flusher).Flush()
			w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		case "/empty":
			w.Header().Set("Grpc-Status", "14")
			w.WriteHeader(http.StatusOK)
		case "/unread":
			w.WriteHeader(http.StatusAccepted)
		}
	})
	fr, open := dialFrames(t, addr)
	// next reads stream id's frames (others are the connection's) until
	// it ends; it reports them as "H" (headers), "D" (data), "H." / "D."
	// (with END_STREAM) and "R<code>" (reset).
	next := func(id uint32) []string {
		var got []string
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("stream %d after %v: %v", id, got, err)
			}
			if sid := f.Header().StreamID; sid != id {
				if sid != 0 {
					t.Errorf("a frame on stream %d after its end: %v", sid, f)
				}
				continue
			}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				got = append(got, "H"+map[bool]string{true: "."}[f.StreamEnded()])
			case *http2.DataFrame:
				got = append(got, "D"+map[bool]string{true: "."}[f.StreamEnded()])
			case *http2.RSTStreamFrame:
				return append(got, "R"+f.ErrCode.String())
			}
			if f.Header().Flags.Has(http2.FlagHeadersEndStream) {
				return got
			}
		}
	}
	for _, tc := range []struct {
		id   uint32
		path string
		end  bool
		want string
	}{
		{1, "/small", true, "[H D.]"},
		{3, "/trailers", true, "[H D H.]"},
		{5, "/empty", true, "[H.]"},
		{7, "/unread", false, "[H. RNO_ERROR]"},
		// A space or control byte in :path would split an HTTP/1.1
		// endpoint's request line.
		{9, "/a b", true, "[RPROTOCOL_ERROR]"},
		{11, "/a\tb", true, "[RPROTOCOL_ERROR]"},
		{13, "/a?b c", true, "[RPROTOCOL_ERROR]"},
	} {
		open(tc.id, tc.path, tc.end)
		got := next(tc.id)
		if tc.path == "/unread" {
			got = append(got, next(tc.id)...)
		}
		if s := strings.Join(strings.Fields(fmt.Sprint(got)), " "); s != tc.want {
			t.Errorf("%s: frames %s, want %s", tc.path, s, tc.want)
		}
	}
	// Nothing more on stream 1 (a second END_STREAM would come before the
	// PING's ack).
	_ = fr.WritePing(false, [8]byte{7})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			break
		}
		if id := f.Header().StreamID; id != 0 {
			t.Errorf("a frame on stream %d after its end: %v", id, f)
		}
	}
}

// A request that expects 100-continue gets the 100 before it sends its
// body, once its handler reads it; a handler that answers without reading
// sends no 100, only its answer.
func TestH2ServerExpectContinue(t *testing.T) {
	addr := serveFrameH2(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	fr, openStream := dialFrames(t, addr)
	open := func(id uint32, path string) { openStream(id, path, false, "expect", "100-continue") }
	// status reads frames until stream id's next HEADERS and returns its
	// :status and whether it ended the stream.
	status := func(id uint32) (string, bool) {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("stream %d: %v", id, err)
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == id {
				return h.PseudoValue("status"), h.StreamEnded()
			}
			if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == id {
				t.Fatalf("stream %d reset: %v", id, r.ErrCode)
			}
		}
	}
	open(1, "/echo")
	if s, end := status(1); s != "100" || end {
		t.Fatalf("first answer to an expecting request: status %q (end %v), want 100", s, end)
	}
	if err := fr.WriteData(1, true, []byte("body")); err != nil {
		t.Fatal(err)
	}
	if s, _ := status(1); s != "200" {
		t.Fatalf("answer after the body: status %q, want 200", s)
	}
	open(3, "/refuse")
	if s, end := status(3); s != "403" || !end {
		t.Fatalf("a refusing handler's answer: status %q (end %v), want 403 ending the stream (no 100)", s, end)
	}
}

// dialFrames connects to an HTTP/2 server at the frame level (preface and
// SETTINGS sent) and returns its framer and a function that opens stream
// id with a POST of path and the extra header fields (name, value, ...).
func dialFrames(t *testing.T, addr string) (*http2.Framer, func(id uint32, path string, end bool, extra ...string)) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	open := func(id uint32, path string, end bool, extra ...string) {
		hb.Reset()
		fields := append([]string{":method", "POST", ":scheme", "http", ":path", path, ":authority", "a"}, extra...)
		for i := 0; i+1 < len(fields); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: end}); err != nil {
			t.Fatal(err)
		}
	}
	return fr, open
}

// An answer carries a Date header (the handler's own when it set one), as
// net/http's server and Envoy add it.
func TestH2ServerDate(t *testing.T) {
	addr := serveFrameH2(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/own" {
			w.Header().Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
		}
		w.WriteHeader(http.StatusNoContent)
	})
	fr, open := dialFrames(t, addr)
	date := func(id uint32) []string {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("stream %d: %v", id, err)
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == id {
				var got []string
				for _, hf := range h.RegularFields() {
					if hf.Name == "date" {
						got = append(got, hf.Value)
					}
				}
				return got
			}
		}
	}
	before := time.Now().Add(-time.Second)
	open(1, "/", true)
	got := date(1)
	if len(got) != 1 {
		t.Fatalf("date fields %q, want one", got)
	}
	if d, err := http.ParseTime(got[0]); err != nil || d.Before(before.Truncate(time.Second)) || d.After(time.Now()) {
		t.Fatalf("date %q (%v): not now", got[0], err)
	}
	open(3, "/own", true)
	if got := date(3); len(got) != 1 || got[0] != "Mon, 02 Jan 2006 15:04:05 GMT" {
		t.Fatalf("date fields %q, want the handler's own only", got)
	}
}

// writeLog is a connection that keeps a copy of each write.
type writeLog struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (c *writeLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, bytes.Clone(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// TestH2ServerWholeAnswerOneWrite: an answer whose handler wrote a small
// body and trailers without flushing (proxyH2 with an endpoint's answer
// all in) goes to the connection in one write: headers, body, trailers.
func TestH2ServerWholeAnswerOneWrite(t *testing.T) {
	s := newFrameH2Server(func(w http.ResponseWriter, r *http.Request) {
		st := w.(*h2sStream)
		st.setH2Head([]hpack.HeaderField{{Name: "content-type", Value: "application/grpc"}}, http.StatusOK)
		_, _ = w.Write(bytes.Repeat([]byte{'a'}, 1024))
		st.trailers = []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}
	}, time.Minute)
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	client, server := net.Pipe()
	defer client.Close()
	logged := &writeLog{Conn: server}
	go newH2sConn(s, logged).serve()
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))

	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	_ = fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, hf := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/x"}, {":authority", "a"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
	go func() { _, _ = client.Write(out.Bytes()) }()
	in := http2.NewFramer(nil, client)
	for {
		f, err := in.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagHeadersEndStream) {
			break
		}
	}
	logged.mu.Lock()
	defer logged.mu.Unlock()
	var with []int // the writes that carry frames of stream 1, and their frame types
	var types []http2.FrameType
	for i, w := range logged.writes {
		wf := http2.NewFramer(nil, bytes.NewReader(w))
		for {
			f, err := wf.ReadFrame()
			if err != nil {
				break
			}
			if f.Header().StreamID == 1 {
				if len(with) == 0 || with[len(with)-1] != i {
					with = append(with, i)
				}
				types = append(types, f.Header().Type)
			}
		}
	}
	want := []http2.FrameType{http2.FrameHeaders, http2.FrameData, http2.FrameHeaders}
	if len(with) != 1 || !slices.Equal(types, want) {
		t.Fatalf("stream 1's frames %v went in writes %v; want %v in one write", types, with, want)
	}
}

// TestH2ServerWindowWaits: answers larger than the connection's window,
// then than their streams' windows, arrive whole, the client crediting a
// window only as it reads: streams waiting for a window are woken by the
// client's updates of the connection's (streamWin false: their own windows
// do not run out) and of their own (true).
func TestH2ServerWindowWaits(t *testing.T) {
	for _, streamWin := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", streamWin), func(t *testing.T) { testH2ServerWindowWaits(t, streamWin) })
	}
}

func testH2ServerWindowWaits(t *testing.T, streamWin bool) {
	const size = 100 << 10
	s := newFrameH2Server(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte{'w'}, size))
	}, time.Minute)
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	client, server := net.Pipe()
	defer client.Close()
	go newH2sConn(s, server).serve()
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))

	out := make(chan []byte, 64)
	go func() {
		for b := range out {
			if _, err := client.Write(b); err != nil {
				return
			}
		}
	}()
	defer close(out)
	frame := func(write func(fr *http2.Framer)) {
		var b bytes.Buffer
		write(http2.NewFramer(&b, nil))
		out <- b.Bytes()
	}
	out <- []byte(http2.ClientPreface)
	win := uint32(1 << 20) // the connection's window (65,535) runs out first
	if streamWin {
		win = 16 << 10
	}
	frame(func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: win})
		if streamWin {
			_ = fr.WriteWindowUpdate(0, 1<<20) // the streams' windows run out first
		}
	})
	for _, id := range []uint32{1, 3} {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, hf := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "a"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		frame(func(fr *http2.Framer) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
		})
	}
	// A window is credited only once used up, a moment later: the
	// streams wait for it.
	got, unacked := map[uint32]int{}, map[uint32]int{}
	ended := 0
	in := http2.NewFramer(nil, client)
	for ended < 2 {
		f, err := in.ReadFrame()
		if err != nil {
			t.Fatalf("after %v bytes: %v", got, err)
		}
		df, ok := f.(*http2.DataFrame)
		if !ok {
			continue
		}
		got[df.StreamID] += len(df.Data())
		id, limit := uint32(0), 65535
		if streamWin {
			id, limit = df.StreamID, int(win)
		}
		if unacked[id] += len(df.Data()); unacked[id] == limit {
			time.Sleep(20 * time.Millisecond)
			frame(func(fr *http2.Framer) { _ = fr.WriteWindowUpdate(id, uint32(limit)) })
			unacked[id] = 0
		}
		if df.StreamEnded() {
			ended++
		}
	}
	if got[1] != size || got[3] != size {
		t.Fatalf("bytes by stream %v, want %d each", got, size)
	}
}
