package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Server is the gateway's HTTP/2 server (h2c, and h2 over TLS): it speaks
// frames itself (x/net's Framer and HPACK) instead of net/http's server. One
// goroutine per connection reads and answers the connection's frames; each
// stream's handler runs on a goroutine of its own (a worker kept from
// stream to stream, h2sworkers.go) and writes its frames
// straight to the connection under a write lock (through the batching
// writer, batchconn.go). What net/http's server adds per call and this
// does not: its serve loop, which every frame goes through (the read loop
// hands it over a channel, the handler's writes come back over another,
// and writeFrameAsync writes each frame on yet another goroutine), and a
// flush per frame. What it does not do: server push, priorities (PRIORITY
// is read and ignored), the HPACK dynamic table and Huffman coding on the way out (h2Config's
// reason), Content-Type sniffing, client trailers (read and dropped: the
// gateway forwards none). It adds a Date header and answers 100-continue
// as net/http's server does.
//
// The handler gets an *http.Request and an http.ResponseWriter (with
// Flush), so serveH2On serves both servers; SEXTANT_H2_SERVER=nethttp
// brings net/http's back (newH2Server).
type h2Server struct {
	handler http.HandlerFunc
	fast    h2Handler     // instead of handler: the head decoded straight into fasthttp's request
	idle    time.Duration // a connection without streams is closed after it
	workers h2sWorkers    // the streams' handlers run on them

	mu      sync.Mutex
	conns   map[*h2sConn]struct{}
	closing bool
	wg      sync.WaitGroup // the connections' goroutines
}

const (
	h2sMaxStreams  = 250     // SETTINGS_MAX_CONCURRENT_STREAMS, net/http's default
	h2sStreamWin   = 1 << 20 // what a client may send on a stream before its handler reads
	h2sConnWin     = 16 << 20
	h2sMaxHeaders  = 1 << 20 // the largest request header list (net/http's MaxHeaderBytes)
	h2sBodyBuf     = 16 << 10
	h2sPrefaceWait = 30 * time.Second
	h2sMaxWrite    = 64 << 10 // data frames written under one hold of the write lock
)

var (
	errH2sStreamReset = errors.New("gateway: http2 stream reset by the client")
	errH2sConnClosed  = errors.New("gateway: http2 client connection closed")
	errH2sStreamDone  = errors.New("gateway: http2 stream closed")
)

// h2sConnKey is the context key of what stands for a connection in its
// streams' fasthttp contexts (an *h2Conn or *h2TLSConn: its addresses and
// TLS state), made once per connection (serveH2On reads it): one per
// stream was an allocation per call.
type h2sConnKey struct{}

// h2Serving is an HTTP/2 server of a listener: net/http's or h2Server.
type h2Serving interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

// useNetHTTPH2 reports whether SEXTANT_H2_SERVER asks for net/http's HTTP/2
// server instead of h2Server.
func useNetHTTPH2() bool { return os.Getenv("SEXTANT_H2_SERVER") == "nethttp" }

func newFrameH2Server(h http.HandlerFunc, idle time.Duration) *h2Server {
	return &h2Server{handler: h, idle: idle, conns: make(map[*h2sConn]struct{})}
}

// newFastH2Server is the gateway's: h gets each request's head in a pooled
// fasthttp context, returned to the pool when the stream is done.
func newFastH2Server(h h2Handler, idle time.Duration) *h2Server {
	return &h2Server{fast: h, idle: idle, conns: make(map[*h2sConn]struct{})}
}

// Serve serves the connections ln accepts until ln is closed; the
// connections are served on until they end or Shutdown.
func (s *h2Server) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.Close()
			continue
		}
		sc := newH2sConn(s, c)
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			sc.serve()
			s.mu.Lock()
			delete(s.conns, sc)
			s.mu.Unlock()
		}()
	}
}

// Shutdown sends every connection a GOAWAY (no new streams), closes those
// without streams at once and the others once their streams are done, and
// waits for them until ctx ends, when it closes what is left.
func (s *h2Server) Shutdown(ctx context.Context) error {
	defer s.workers.close()
	s.mu.Lock()
	s.closing = true
	conns := make([]*h2sConn, 0, len(s.conns))
	for sc := range s.conns {
		conns = append(conns, sc)
	}
	s.mu.Unlock()
	for _, sc := range conns {
		sc.drain(http2.ErrCodeNo)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }() // ends: every connection ends, at the latest once closed below
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	conns = conns[:0]
	for sc := range s.conns {
		conns = append(conns, sc)
	}
	s.mu.Unlock()
	for _, sc := range conns { // not under s.mu: a close may wait for pending writes
		sc.close(errH2sConnClosed)
	}
	return ctx.Err()
}

// h2sConn is one client connection. Lock order: wmu, then mu.
type h2sConn struct {
	s    *h2Server
	conn net.Conn
	tls  *tls.ConnectionState
	base *http.Request // every stream's request starts as a copy: context, addresses, TLS
	stop context.CancelFunc

	wmu   sync.Mutex // one writer of frames at a time
	wbuf  bytes.Buffer
	wfr   *http2.Framer // writes into wbuf
	hbuf  bytes.Buffer
	lower []byte // a header name being lower-cased
	werr  error

	mu          sync.Mutex
	streams     map[uint32]*h2sStream
	running     int    // handlers running (a reset stream's until it returns)
	lastID      uint32 // the highest stream the client opened
	sendWin     int64
	winWaiters  int   // streams waiting for a window (h2sStream.winWait)
	initWin     int64 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame    int   // the client's SETTINGS_MAX_FRAME_SIZE
	recvWin     int64 // what the client may still send on the connection
	connUnacked int64 // read (or dropped) and not yet credited back
	goaway      bool  // GOAWAY sent or received: no new streams
	closed      bool
	idleTimer   *time.Timer
	handlers    sync.WaitGroup
}

func newH2sConn(s *h2Server, c net.Conn) *h2sConn {
	sc := &h2sConn{s: s, conn: c, streams: make(map[uint32]*h2sStream),
		sendWin: 65535, initWin: 65535, maxFrame: 16384, recvWin: h2sConnWin}
	local := c.LocalAddr()
	if tc, ok := c.(*tls.Conn); ok {
		st := tc.ConnectionState()
		sc.tls = &st
	}
	base := context.WithValue(context.Background(), http.LocalAddrContextKey, local)
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		base = context.WithValue(base, h2sConnKey{}, h2StandIn(net.TCPAddrFromAddrPort(ap), local, sc.tls))
	}
	ctx, cancel := context.WithCancel(base)
	sc.stop = cancel
	sc.base = (&http.Request{Proto: "HTTP/2.0", ProtoMajor: 2, RemoteAddr: c.RemoteAddr().String(), TLS: sc.tls}).WithContext(ctx)
	sc.wfr = http2.NewFramer(&sc.wbuf, nil)
	return sc
}

// serve reads the connection's frames until it ends, then waits for its
// handlers.
func (sc *h2sConn) serve() {
	defer func() {
		sc.close(errH2sConnClosed)
		sc.handlers.Wait()
		sc.stop()
	}()
	sc.wmu.Lock()
	_ = sc.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: h2sMaxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2sStreamWin},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: h2sMaxHeaders},
	)
	_ = sc.wfr.WriteWindowUpdate(0, h2sConnWin-65535)
	err := sc.flushLocked()
	sc.wmu.Unlock()
	if err != nil {
		return
	}
	br := bufio.NewReaderSize(sc.conn, 16<<10)
	_ = sc.conn.SetReadDeadline(time.Now().Add(h2sPrefaceWait))
	var pre [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil || string(pre[:]) != http2.ClientPreface {
		if err == nil {
			sc.goAway(http2.ErrCodeProtocol)
		}
		return
	}
	_ = sc.conn.SetReadDeadline(time.Time{})
	sc.armIdle()
	fr := http2.NewFramer(nil, br)
	heads := newH2HeadReader(h2sMaxHeaders)
	fr.SetMaxReadFrameSize(16384)
	fr.SetReuseFrames()
	first := true
	for {
		f, err := fr.ReadFrame()
		var head *h2Head
		if hf, ok := f.(*http2.HeadersFrame); ok && err == nil {
			head, err = heads.read(fr, hf)
		}
		if err != nil {
			var se http2.StreamError
			var ce http2.ConnectionError
			switch {
			case errors.As(err, &se):
				sc.mu.Lock()
				if se.StreamID > sc.lastID && se.StreamID%2 == 1 {
					sc.lastID = se.StreamID // an invalid HEADERS still opened (and closed) it
				}
				sc.mu.Unlock()
				sc.resetStream(se.StreamID, se.Code)
				continue
			case errors.As(err, &ce):
				sc.goAway(http2.ErrCode(ce))
			case errors.Is(err, http2.ErrFrameTooLarge):
				sc.goAway(http2.ErrCodeFrameSize)
			}
			return
		}
		if first {
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				sc.goAway(http2.ErrCodeProtocol)
				return
			}
			first = false
		}
		code, ok := http2.ErrCode(0), true
		if head != nil {
			code, ok = sc.onHeaders(head)
		} else {
			code, ok = sc.onFrame(f)
		}
		if !ok {
			sc.goAway(code)
			return
		}
	}
}

// onFrame handles one frame; false with the code of a connection error.
func (sc *h2sConn) onFrame(f http2.Frame) (http2.ErrCode, bool) {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return 0, true
		}
		if code, ok := sc.onSettings(f); !ok {
			return code, false
		}
		sc.wmu.Lock()
		_ = sc.wfr.WriteSettingsAck()
		_ = sc.flushLocked()
		sc.wmu.Unlock()
	case *http2.DataFrame:
		return sc.onData(f)
	case *http2.WindowUpdateFrame:
		return sc.onWindowUpdate(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			sc.wmu.Lock()
			_ = sc.wfr.WritePing(true, f.Data)
			_ = sc.flushLocked()
			sc.wmu.Unlock()
		}
	case *http2.RSTStreamFrame:
		sc.mu.Lock()
		if f.StreamID > sc.lastID {
			sc.mu.Unlock()
			return http2.ErrCodeProtocol, false // an idle stream (RFC 9113 6.4)
		}
		st := sc.streams[f.StreamID]
		if st != nil {
			delete(sc.streams, f.StreamID)
			st.failLocked(errH2sStreamReset)
		}
		sc.mu.Unlock()
	case *http2.GoAwayFrame:
		sc.mu.Lock()
		sc.goaway = true
		idle := sc.running == 0
		sc.mu.Unlock()
		if idle {
			return http2.ErrCodeNo, false
		}
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			sc.resetStream(f.StreamID, http2.ErrCodeProtocol) // depends on itself (RFC 9113 5.3.1)
		}
	case *http2.PushPromiseFrame:
		return http2.ErrCodeProtocol, false // a client cannot push
	}
	return 0, true
}

func (sc *h2sConn) onSettings(f *http2.SettingsFrame) (http2.ErrCode, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	code := http2.ErrCodeNo
	_ = f.ForeachSetting(func(s http2.Setting) error {
		if code != http2.ErrCodeNo {
			return nil
		}
		if err := s.Valid(); err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				code = http2.ErrCode(ce)
			} else {
				code = http2.ErrCodeProtocol
			}
			return nil
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - sc.initWin
			for _, st := range sc.streams {
				if st.sendWin+delta > 1<<31-1 {
					code = http2.ErrCodeFlowControl
					return nil
				}
				st.sendWin += delta
				st.cond.Broadcast()
			}
			sc.initWin = int64(s.Val)
		case http2.SettingMaxFrameSize:
			sc.maxFrame = int(s.Val)
		}
		return nil
	})
	return code, code == http2.ErrCodeNo
}

func (sc *h2sConn) onWindowUpdate(f *http2.WindowUpdateFrame) (http2.ErrCode, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if f.StreamID == 0 {
		if f.Increment == 0 {
			return http2.ErrCodeProtocol, false
		}
		if sc.sendWin+int64(f.Increment) > 1<<31-1 {
			return http2.ErrCodeFlowControl, false
		}
		sc.sendWin += int64(f.Increment)
		// Only the streams waiting for window: the others' conds have
		// their body readers waiting, for data (a stream's client sends
		// these updates as it reads, as often as every message).
		if sc.winWaiters > 0 {
			for _, st := range sc.streams {
				if st.winWait {
					st.cond.Broadcast()
				}
			}
		}
		return 0, true
	}
	if f.StreamID > sc.lastID {
		return http2.ErrCodeProtocol, false // an idle stream
	}
	st := sc.streams[f.StreamID]
	if f.Increment == 0 {
		go sc.resetStream(f.StreamID, http2.ErrCodeProtocol) // not under mu
		if st != nil {
			delete(sc.streams, f.StreamID)
			st.failLocked(errH2sStreamDone)
		}
		return 0, true
	}
	if st == nil {
		return 0, true // closed meanwhile: allowed
	}
	if st.sendWin+int64(f.Increment) > 1<<31-1 {
		go sc.resetStream(f.StreamID, http2.ErrCodeFlowControl)
		delete(sc.streams, f.StreamID)
		st.failLocked(errH2sStreamDone)
		return 0, true
	}
	st.sendWin += int64(f.Increment)
	if st.winWait {
		st.cond.Broadcast()
	}
	return 0, true
}

// onHeaders opens a stream and starts its handler, or takes a stream's
// trailers.
func (sc *h2sConn) onHeaders(f *h2Head) (http2.ErrCode, bool) {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ErrCodeProtocol, false
	}
	sc.mu.Lock()
	if st := sc.streams[id]; st != nil {
		// Trailers: they end the stream; the gateway forwards none.
		if st.remoteDone {
			// Half-closed (remote): a stream error; closed (the answer
			// ended too, though the stream is still in the table until its
			// handler's goroutine is done): a connection error (RFC 9113
			// 5.1).
			done := st.localDone
			sc.mu.Unlock()
			if done {
				return http2.ErrCodeStreamClosed, false
			}
			sc.resetStream(id, http2.ErrCodeStreamClosed)
			return 0, true
		}
		if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
			delete(sc.streams, id)
			st.failLocked(errH2sStreamDone)
			sc.mu.Unlock()
			sc.resetStream(id, http2.ErrCodeProtocol)
			return 0, true
		}
		st.endLocked()
		sc.mu.Unlock()
		return 0, true
	}
	if id <= sc.lastID {
		sc.mu.Unlock()
		return http2.ErrCodeStreamClosed, false // RFC 9113 5.1: HEADERS on a closed stream
	}
	sc.lastID = id
	refuse := sc.goaway || sc.running >= h2sMaxStreams
	initWin := sc.initWin
	sc.mu.Unlock()
	if f.HasPriority() && f.Priority.StreamDep == id {
		sc.resetStream(id, http2.ErrCodeProtocol)
		return 0, true
	}
	if refuse {
		sc.resetStream(id, http2.ErrCodeRefusedStream)
		return 0, true
	}
	st := &h2sStream{sc: sc, id: id, sendWin: initWin, recvWin: h2sStreamWin, remoteDone: f.StreamEnded()}
	req := &st.req
	ctx, declared, err := sc.newRequest(f, req)
	if err != nil {
		sc.resetStream(id, http2.ErrCodeProtocol)
		return 0, true
	}
	st.declared, st.head, st.ctx = declared, req.Method == http.MethodHead, ctx
	st.cond.L = &sc.mu
	if ctx != nil {
		for _, hf := range f.RegularFields() {
			if hf.Name == "te" { // only "trailers" (newRequest)
				st.te = true
			} else {
				st.fields |= fieldHead([]byte(hf.Name)) // prepareRequest looks up only these
			}
		}
	}
	if !f.StreamEnded() {
		req.Body = (*h2sBody)(st)
		var expect string
		if ctx != nil {
			expect = b2s(ctx.Request.Header.Peek("Expect"))
		} else {
			expect = req.Header.Get("Expect")
		}
		if strings.EqualFold(expect, "100-continue") {
			st.expect, st.continueDue = true, true
		}
	}
	sc.mu.Lock()
	if sc.closed {
		sc.mu.Unlock()
		if ctx != nil {
			releaseH2Ctx(ctx)
		}
		return 0, true
	}
	sc.streams[id] = st
	sc.running++
	sc.handlers.Add(1)
	if sc.idleTimer != nil {
		sc.idleTimer.Stop()
	}
	sc.mu.Unlock()
	if f.Truncated {
		req = nil // a 431: the header list is over SETTINGS_MAX_HEADER_LIST_SIZE
	}
	sc.s.workers.run(st, req)
	return 0, true
}

// newRequest checks a request's header block (RFC 9113 8.2, 8.3), makes
// req its request and returns its fasthttp context (for a fast handler:
// the head is there, not in the request's Header and URL) and its declared
// content length (-1: none).
func (sc *h2sConn) newRequest(f *h2Head, req *http.Request) (*fasthttp.RequestCtx, int64, error) {
	var method, scheme, path, authority string
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":path":
			path = hf.Value
		case ":authority":
			authority = hf.Value
		default:
			return nil, 0, errors.New("gateway: http2 request with pseudo-header " + hf.Name)
		}
	}
	connect := method == http.MethodConnect
	if method == "" || (!connect && (scheme == "" || path == "")) || (connect && (scheme != "" || path != "" || authority == "")) {
		return nil, 0, errors.New("gateway: http2 request without its pseudo-headers")
	}
	regular := f.RegularFields()
	// With a fast handler the head goes straight into a pooled fasthttp
	// request (no http.Header, no url.URL); else into req.Header.
	var ctx *fasthttp.RequestCtx
	var hdr http.Header
	if sc.s.fast != nil {
		ctx = h2Ctxs.Get().(*fasthttp.RequestCtx)
	} else {
		hdr = make(http.Header, len(regular))
	}
	fail := func(msg string) (*fasthttp.RequestCtx, int64, error) {
		if ctx != nil {
			releaseH2Ctx(ctx)
		}
		return nil, 0, errors.New("gateway: http2 request with " + msg)
	}
	declared := int64(-1)
	var cookies []string
	var host string
	for _, hf := range regular {
		if connectionSpecific(hf.Name) {
			return fail("connection header " + hf.Name)
		}
		switch hf.Name {
		case "te":
			if hf.Value != "trailers" {
				return fail("te " + hf.Value)
			}
			if ctx != nil {
				continue // kept apart (h2sStream.te): no hop-by-hop field to delete for it
			}
		case "content-length":
			n, err := strconv.ParseUint(hf.Value, 10, 63)
			if err != nil || (declared >= 0 && int64(n) != declared) {
				return fail("content-length " + hf.Value)
			}
			declared = int64(n)
		case "cookie":
			cookies = append(cookies, hf.Value) // one header, as HTTP/1.1 has it (RFC 9113 8.2.3)
			continue
		case "host":
			if host == "" {
				host = hf.Value
			}
			if ctx != nil {
				continue // :authority wins (RFC 9113 8.3.1)
			}
		}
		if ctx != nil {
			ctx.Request.Header.Add(hf.Name, hf.Value)
			continue
		}
		k := canonicalHeader(hf.Name)
		hdr[k] = append(hdr[k], hf.Value)
	}
	if len(cookies) > 0 {
		c := cookies[0]
		if len(cookies) > 1 {
			c = strings.Join(cookies, "; ")
		}
		if ctx != nil {
			ctx.Request.Header.Add("Cookie", c)
		} else {
			hdr["Cookie"] = []string{c}
		}
	}
	if authority == "" {
		authority = host
	}
	// A space or control byte cannot be in a URI: forwarded to an
	// HTTP/1.1 endpoint it would split the request line (nginx refuses
	// such a :path too).
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c == 0x7f {
			return fail("path " + strconv.Quote(path))
		}
	}
	var u *url.URL
	switch {
	case connect:
		u = &url.URL{Host: authority}
	case ctx != nil && (path[0] == '/' || path == "*"):
		// fasthttp parses the path; a request line's form needs no url.URL.
	default:
		var err error
		if u, err = url.ParseRequestURI(path); err != nil {
			return fail("path " + strconv.Quote(path))
		}
	}
	*req = *sc.base // its context too
	req.Method, req.URL, req.RequestURI, req.Host, req.Header = method, u, path, authority, hdr
	req.Body = http.NoBody
	switch {
	case f.StreamEnded():
		if declared > 0 {
			return fail("an end before its content-length")
		}
		req.ContentLength = 0
	case declared >= 0:
		req.ContentLength = declared
	default:
		req.ContentLength = -1
	}
	if ctx != nil {
		h := &ctx.Request.Header
		h.SetMethod(method)
		if connect {
			h.SetRequestURI("/") // as url.URL{Host: authority}.RequestURI()
		} else {
			h.SetRequestURI(path)
		}
		h.SetHost(authority)
	}
	return ctx, declared, nil
}

func (sc *h2sConn) onData(f *http2.DataFrame) (http2.ErrCode, bool) {
	id := f.StreamID
	n := int64(f.Length)
	data := f.Data()
	sc.mu.Lock()
	if n > sc.recvWin {
		sc.mu.Unlock()
		return http2.ErrCodeFlowControl, false
	}
	sc.recvWin -= n
	st := sc.streams[id]
	if st == nil || st.remoteDone {
		idle := id > sc.lastID
		sc.mu.Unlock()
		if idle {
			return http2.ErrCodeProtocol, false
		}
		sc.creditConn(n)
		sc.resetStream(id, http2.ErrCodeStreamClosed)
		return 0, true
	}
	if n > st.recvWin {
		delete(sc.streams, id)
		st.failLocked(errH2sStreamDone)
		sc.mu.Unlock()
		sc.creditConn(n)
		sc.resetStream(id, http2.ErrCodeFlowControl)
		return 0, true
	}
	st.recvWin -= n
	st.got += int64(len(data))
	if st.declared >= 0 && (st.got > st.declared || (f.StreamEnded() && st.got != st.declared)) {
		delete(sc.streams, id)
		st.failLocked(errors.New("gateway: http2 request body does not match its content-length"))
		sc.mu.Unlock()
		sc.creditConn(n)
		sc.resetStream(id, http2.ErrCodeProtocol)
		return 0, true
	}
	if st.rbuf == nil && len(data) > 0 {
		st.rbuf, st.rbufp = getH2sBuf(len(data))
	}
	st.rbuf = append(st.rbuf, data...)
	if f.StreamEnded() {
		st.endLocked()
	}
	st.cond.Broadcast()
	sc.mu.Unlock()
	if pad := n - int64(len(data)); pad > 0 {
		sc.creditConn(pad)
		sc.credit(id, pad)
	}
	return 0, true
}

// creditConn gives the client back n bytes of the connection's window,
// in updates of at least a quarter of it.
func (sc *h2sConn) creditConn(n int64) {
	sc.mu.Lock()
	sc.connUnacked += n
	send := int64(0)
	if sc.connUnacked >= h2sConnWin/4 {
		send, sc.connUnacked = sc.connUnacked, 0
		sc.recvWin += send
	}
	sc.mu.Unlock()
	if send > 0 {
		sc.wmu.Lock()
		_ = sc.wfr.WriteWindowUpdate(0, uint32(send))
		_ = sc.flushLocked()
		sc.wmu.Unlock()
	}
}

// credit gives a stream's client back n bytes of its window.
func (sc *h2sConn) credit(id uint32, n int64) {
	sc.mu.Lock()
	if st := sc.streams[id]; st != nil {
		st.recvWin += n
	}
	sc.mu.Unlock()
	sc.wmu.Lock()
	_ = sc.wfr.WriteWindowUpdate(id, uint32(n))
	_ = sc.flushLocked()
	sc.wmu.Unlock()
}

func (sc *h2sConn) resetStream(id uint32, code http2.ErrCode) {
	sc.wmu.Lock()
	_ = sc.wfr.WriteRSTStream(id, code)
	_ = sc.flushLocked()
	sc.wmu.Unlock()
}

// goAway ends the connection with a GOAWAY of code.
func (sc *h2sConn) goAway(code http2.ErrCode) {
	sc.mu.Lock()
	last := sc.lastID
	sc.goaway = true
	sc.mu.Unlock()
	sc.wmu.Lock()
	_ = sc.wfr.WriteGoAway(last, code, nil)
	_ = sc.flushLocked()
	sc.wmu.Unlock()
	// Closing with bytes unread (frames the client sent before it read the
	// GOAWAY) would reset the connection, and the reset can destroy the
	// GOAWAY before the client reads it: read and drop what it still
	// sends until it closes, for at most a second (the lingering close of
	// nginx and of net/http's server). Only serve's goroutine calls this,
	// so it is the connection's only reader.
	_ = sc.conn.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, sc.conn, 1<<20)
	sc.close(errH2sConnClosed)
}

// drain sends a GOAWAY: the streams open finish, no other starts, and the
// connection closes when the last one is done.
func (sc *h2sConn) drain(code http2.ErrCode) {
	sc.mu.Lock()
	if sc.closed {
		sc.mu.Unlock()
		return
	}
	last := sc.lastID
	sc.goaway = true
	idle := sc.running == 0
	sc.mu.Unlock()
	sc.wmu.Lock()
	_ = sc.wfr.WriteGoAway(last, code, nil)
	_ = sc.flushLocked()
	sc.wmu.Unlock()
	if idle {
		sc.close(errH2sConnClosed)
	}
}

// armIdle starts the idle timer of a connection without streams.
func (sc *h2sConn) armIdle() {
	if sc.s.idle <= 0 {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.idleTimer == nil {
		sc.idleTimer = time.AfterFunc(sc.s.idle, func() {
			sc.mu.Lock()
			idle := sc.running == 0
			sc.mu.Unlock()
			if idle {
				sc.drain(http2.ErrCodeNo)
			}
		})
		return
	}
	sc.idleTimer.Reset(sc.s.idle)
}

// close ends the connection and fails its streams.
func (sc *h2sConn) close(err error) {
	sc.mu.Lock()
	if sc.closed {
		sc.mu.Unlock()
		return
	}
	sc.closed, sc.goaway = true, true
	for id, st := range sc.streams {
		delete(sc.streams, id)
		st.failLocked(err)
	}
	if sc.idleTimer != nil {
		sc.idleTimer.Stop()
	}
	sc.mu.Unlock()
	sc.conn.Close()
}

// flushLocked writes the frames in wbuf in one write; sc.wmu is held.
func (sc *h2sConn) flushLocked() error {
	if sc.werr != nil {
		sc.wbuf.Reset()
		return sc.werr
	}
	if sc.wbuf.Len() == 0 {
		return nil
	}
	_, err := sc.conn.Write(sc.wbuf.Bytes())
	sc.wbuf.Reset()
	if sc.wbuf.Cap() > 4*h2sMaxWrite {
		sc.wbuf = bytes.Buffer{}
	}
	if err != nil {
		sc.werr = err
		go sc.close(err) // not under wmu: close takes mu, and a handler may hold mu waiting on nothing
	}
	return err
}

// streamDone is a handler's end.
func (sc *h2sConn) streamDone(st *h2sStream) {
	sc.mu.Lock()
	if sc.streams[st.id] == st {
		delete(sc.streams, st.id)
	}
	putH2sBuf(st.rbuf, st.rbufp)
	st.rbuf, st.rbufp = nil, nil
	// The body is closed with its handler, as net/http's: a reader left
	// (a request body still being sent upstream) gets an error.
	st.failLocked(errH2sStreamDone)
	sc.running--
	drained := sc.running == 0 && sc.goaway
	idle := sc.running == 0 && !sc.closed
	sc.mu.Unlock()
	putH2sBuf(st.wbuf, st.wbufp) // the handler's, and it returned
	st.wbuf, st.wbufp = nil, nil
	sc.handlers.Done()
	if drained {
		sc.close(errH2sConnClosed)
	} else if idle {
		sc.armIdle()
	}
}

// h2sBufs are streams' body buffers: a request body's as it arrives, an
// answer's before it is sent. Kept from stream to stream: each was
// allocated and zeroed per stream (about 1% of the gateway's CPU per gRPC
// call, perf).
var h2sBufs = sync.Pool{New: func() any { b := make([]byte, 0, h2sBufSize); return &b }}

const h2sBufSize = 4 << 10

// getH2sBuf returns an empty buffer for at least n bytes, and its pool
// pointer (nil: not pooled, n is over h2sBufSize).
func getH2sBuf(n int) ([]byte, *[]byte) {
	if n > h2sBufSize {
		return make([]byte, 0, min(n, h2sBodyBuf)), nil
	}
	bp := h2sBufs.Get().(*[]byte)
	return (*bp)[:0], bp
}

// putH2sBuf returns b to h2sBufs, unless it grew past its pooled array.
func putH2sBuf(b []byte, bp *[]byte) {
	if bp != nil && cap(b) == h2sBufSize {
		*bp = b[:0]
		h2sBufs.Put(bp)
	}
}

// h2sStream is one stream: its request body as it arrives, and the
// http.ResponseWriter of its handler.
type h2sStream struct {
	sc     *h2sConn
	id     uint32
	cond   sync.Cond            // on sc.mu: data came, the window grew, the stream ended
	head   bool                 // a HEAD request: no body, no content-length of its own
	ctx    *fasthttp.RequestCtx // the request's head, for a fast handler
	fields requestHead          // which fields prepareRequest edits the request has (te: trailers apart; hop.go)
	te     bool                 // the request has te: trailers (not in ctx's header)
	// expect: the request asked for 100-continue (RFC 9110 10.1.1); the
	// 100 goes when the handler first reads the body, as net/http's server
	// and Envoy send it, unless the answer went first.
	expect bool

	// Under sc.mu.
	rbuf        []byte
	rbufp       *[]byte // rbuf's in h2sBufs
	roff        int
	remoteDone  bool  // END_STREAM received
	localDone   bool  // the handler returned: END_STREAM is sent or about to be
	err         error // the stream or connection ended
	recvWin     int64
	unacked     int64
	declared    int64
	got         int64
	sendWin     int64
	winWait     bool // sendData waits for the windows
	continueDue bool // expect, and neither the 100 nor the answer sent yet

	// The handler's.
	hdr         http.Header
	fastHead    *fasthttp.ResponseHeader // the answer's fields besides hdr's (writeHead), encoded from fasthttp's header
	fastLen     int                      // with fastHead: the body's length (-1: unknown)
	upFields    []hpack.HeaderField      // the answer's fields besides hdr's, as an HTTP/2 endpoint sent them (setH2Head)
	trailers    []hpack.HeaderField      // trailers besides hdr's, as an HTTP/2 endpoint sent them
	own         [48]byte                 // a value the handler hands on (keep)
	replay      replayBody               // the request body, kept for retries (proxyH2)
	req         http.Request             // the handler's request
	status      int
	sentHeader  bool
	ended       bool
	wbuf        []byte
	wbufp       *[]byte  // wbuf's in h2sBufs
	trailerKeys []string // declared in the Trailer header
}

func (st *h2sStream) failLocked(err error) {
	if st.err == nil {
		st.err = err
	}
	st.cond.Broadcast()
}

func (st *h2sStream) endLocked() {
	st.remoteDone = true
	st.cond.Broadcast()
}

// run runs the handler; a nil req is a request whose headers were over
// the limit, answered 431.
func (st *h2sStream) run(req *http.Request) {
	defer st.sc.streamDone(st)
	if st.ctx != nil {
		defer releaseH2Ctx(st.ctx) // after the answer's end: the handler's records read it
	}
	defer func() {
		if e := recover(); e != nil {
			// http.ErrAbortHandler, or a bug: the client sees its stream
			// reset, as net/http does, and a bug is logged with its stack.
			if e != http.ErrAbortHandler {
				slog.Error("gateway: http2 handler panicked", "panic", e, "stack", string(debug.Stack()))
			}
			st.reset(http2.ErrCodeInternal)
			return
		}
		st.finish()
	}()
	if req == nil {
		st.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
		return
	}
	if st.ctx != nil {
		st.sc.s.fast(st, req, st.ctx)
		return
	}
	st.sc.s.handler(st, req)
}

func (st *h2sStream) reset(code http2.ErrCode) {
	sc := st.sc
	sc.mu.Lock()
	if sc.streams[st.id] == st {
		delete(sc.streams, st.id)
	}
	gone := st.err != nil
	st.failLocked(errH2sStreamDone)
	sc.mu.Unlock()
	st.ended = true
	if !gone {
		sc.resetStream(st.id, code)
	}
}

func (st *h2sStream) Header() http.Header {
	if st.hdr == nil {
		st.hdr = make(http.Header)
	}
	return st.hdr
}

func (st *h2sStream) WriteHeader(code int) {
	if st.status != 0 || code < 200 {
		return // informational answers are not sent
	}
	st.status = code
	for _, v := range st.hdr["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				st.trailerKeys = append(st.trailerKeys, http.CanonicalHeaderKey(k))
			}
		}
	}
}

func (st *h2sStream) Write(p []byte) (int, error) {
	if st.status == 0 {
		st.WriteHeader(http.StatusOK)
	}
	if st.ended {
		return 0, errH2sStreamDone
	}
	if len(st.wbuf)+len(p) <= h2sBodyBuf {
		if st.wbuf == nil {
			st.wbuf, st.wbufp = getH2sBuf(len(p))
		}
		st.wbuf = append(st.wbuf, p...)
		return len(p), nil
	}
	if err := st.send(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// FlushError sends the headers and what was written.
func (st *h2sStream) FlushError() error {
	if st.status == 0 {
		st.WriteHeader(http.StatusOK)
	}
	if st.ended {
		return errH2sStreamDone
	}
	return st.send(nil, false)
}

func (st *h2sStream) Flush() { _ = st.FlushError() }

// finish ends the answer of a handler that returned: its headers if not
// sent, what it wrote, END_STREAM, its trailers; and resets the stream if
// the client is still sending (RFC 9113 8.1).
func (st *h2sStream) finish() {
	if st.ended {
		return
	}
	if st.status == 0 {
		st.WriteHeader(http.StatusOK)
	}
	st.sc.mu.Lock()
	st.localDone = true
	st.sc.mu.Unlock()
	trailers := st.hasTrailers()
	if !st.sentHeader && !trailers && !st.head && st.hdr.Get("Content-Length") == "" && (st.fastHead == nil || st.fastLen < 0) &&
		fieldValue(st.upFields, "content-length") == "" {
		st.Header().Set("Content-Length", strconv.Itoa(len(st.wbuf)))
	}
	// With trailers to follow, what send leaves unflushed goes with them.
	if err := st.sendFlush(nil, !trailers, !trailers); err != nil {
		return
	}
	if trailers {
		sc := st.sc
		sc.wmu.Lock()
		sc.hbuf.Reset()
		for k, vs := range st.hdr {
			name, ok := strings.CutPrefix(k, http.TrailerPrefix)
			if !ok {
				continue
			}
			st.encode(lowerHeader(canonicalHeader(name)), vs)
		}
		for _, k := range st.trailerKeys {
			st.encode(lowerHeader(k), st.hdr[k])
		}
		for _, f := range st.trailers {
			st.encodeField(f.Name, f.Value)
		}
		sc.writeHeadersLocked(st.id, true, sc.hbuf.Bytes())
		_ = sc.flushLocked()
		sc.wmu.Unlock()
	}
	st.ended = true
	sc := st.sc
	sc.mu.Lock()
	open := !st.remoteDone && st.err == nil
	if sc.streams[st.id] == st {
		delete(sc.streams, st.id)
	}
	sc.mu.Unlock()
	if open {
		sc.resetStream(st.id, http2.ErrCodeNo)
	}
}

func (st *h2sStream) hasTrailers() bool {
	if len(st.trailerKeys) > 0 || len(st.trailers) > 0 {
		return true
	}
	for k := range st.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// connectionSpecific reports whether a lower-case header name is one of
// the connection-specific fields HTTP/2 forbids (RFC 9113 8.2.2): a
// request carrying one is malformed, an answer's are dropped.
func connectionSpecific(name string) bool {
	switch name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// encode adds a header field to sc.hbuf, dropping what HTTP/2 forbids;
// sc.wmu is held.
func (st *h2sStream) encode(name string, vs []string) {
	for _, v := range vs {
		st.encodeField(name, v)
	}
}

// encodeField is encode of one value.
func (st *h2sStream) encodeField(name, v string) {
	if name == "trailer" || connectionSpecific(name) || !httpguts.ValidHeaderFieldValue(v) {
		return
	}
	appendHPACK(&st.sc.hbuf, name, v)
}

// setFastHead makes h, with a body of length n (-1: unknown), the answer's
// head: its fields are encoded from h when the head is sent, with no
// http.Header built; h must stay as it is until then.
func (st *h2sStream) setFastHead(h *fasthttp.ResponseHeader, status, n int) {
	st.fastHead, st.fastLen = h, n
	st.WriteHeader(status)
}

// setH2Head makes fs, an HTTP/2 endpoint's fields as the gateway edited
// them, the answer's head: they are encoded as they are when the head is
// sent; fs must stay as it is until then.
func (st *h2sStream) setH2Head(fs []hpack.HeaderField, status int) {
	st.upFields = fs
	st.WriteHeader(status)
}

// keep is v as a string the stream keeps until its end: in st.own if it
// fits (one per stream).
func (st *h2sStream) keep(v []byte) string {
	if len(v) > len(st.own) {
		return string(v)
	}
	return b2s(st.own[:copy(st.own[:], v)])
}

// encodeFast adds the fields of st.fastHead to sc.hbuf, as writeHead
// copies them (not Content-Length, Connection, Transfer-Encoding or
// Trailer; one Content-Type; the body's length), and reports whether one
// is Date; sc.wmu is held.
func (st *h2sStream) encodeFast() (date bool) {
	sc, h := st.sc, st.fastHead
	for k, v := range h.All() {
		sc.lower = appendLower(sc.lower[:0], k)
		name := b2s(sc.lower) // appendHPACK keeps no field (no dynamic table)
		switch name {
		case "content-length", "content-type", "trailer":
			continue
		case "date":
			date = true
		}
		if connectionSpecific(name) || !httpguts.ValidHeaderFieldValue(b2s(v)) {
			continue
		}
		appendHPACK(&sc.hbuf, name, b2s(v))
	}
	if ct := h.ContentType(); len(ct) > 0 {
		appendHPACK(&sc.hbuf, "content-type", b2s(ct))
	}
	if st.fastLen >= 0 {
		var n [20]byte
		appendHPACK(&sc.hbuf, "content-length", b2s(strconv.AppendInt(n[:0], int64(st.fastLen), 10)))
	}
	return date
}

// send sends the headers if not sent, then what was buffered and p, with
// END_STREAM on the last frame if end.
func (st *h2sStream) send(p []byte, end bool) error { return st.sendFlush(p, end, true) }

// sendFlush is send; without flush, its last frames may stay in sc.wbuf
// for the caller to flush (under sc.wmu) with frames of its own.
func (st *h2sStream) sendFlush(p []byte, end, flush bool) error {
	sc := st.sc
	if !st.sentHeader {
		sc.mu.Lock()
		err := st.err
		sc.mu.Unlock()
		if err != nil {
			return err // reset, or the connection is gone: nothing to send
		}
		st.sentHeader = true
		endHere := end && len(st.wbuf) == 0 && len(p) == 0
		sc.wmu.Lock()
		if st.expect { // the answer goes instead of the 100
			sc.mu.Lock()
			st.continueDue = false
			sc.mu.Unlock()
		}
		sc.hbuf.Reset()
		var code [3]byte
		appendHPACK(&sc.hbuf, ":status", b2s(strconv.AppendInt(code[:0], int64(st.status), 10)))
		for k, vs := range st.hdr {
			if strings.HasPrefix(k, http.TrailerPrefix) || st.isTrailer(k) {
				continue
			}
			st.encode(lowerHeader(k), vs)
		}
		date := len(st.hdr["Date"]) > 0
		if st.fastHead != nil {
			date = st.encodeFast() || date
		}
		for _, f := range st.upFields {
			date = date || f.Name == "date"
			st.encodeField(f.Name, f.Value)
		}
		if !date { // as net/http's server and Envoy add it
			appendHPACK(&sc.hbuf, "date", httpDate(time.Now()))
		}
		sc.writeHeadersLocked(st.id, endHere, sc.hbuf.Bytes())
		// A small buffered body goes in the same write as its headers
		// when the windows have room: one append to the connection, so
		// that the client reads the answer at once.
		inline := false
		if n := int64(len(st.wbuf)); !endHere && len(p) == 0 && n > 0 {
			sc.mu.Lock()
			if n <= int64(sc.maxFrame) && st.err == nil && st.sendWin >= n && sc.sendWin >= n {
				st.sendWin -= n
				sc.sendWin -= n
				inline = true
			}
			sc.mu.Unlock()
			if inline {
				_ = sc.wfr.WriteData(st.id, end, st.wbuf)
				st.wbuf = st.wbuf[:0]
			}
		}
		if flush || !(endHere || inline) {
			err = sc.flushLocked()
		}
		sc.wmu.Unlock()
		if err != nil {
			return err
		}
		if endHere || inline {
			st.ended = end
			return nil
		}
	}
	buffered := len(st.wbuf) > 0
	if buffered {
		if err := st.sendData(st.wbuf, end && len(p) == 0); err != nil {
			return err
		}
		st.wbuf = st.wbuf[:0]
	}
	if len(p) > 0 || (end && !buffered) { // an empty DATA carries END_STREAM when nothing else does
		if err := st.sendData(p, end); err != nil {
			return err
		}
	}
	if end {
		st.ended = true
	}
	return nil
}

func (st *h2sStream) isTrailer(k string) bool {
	for _, t := range st.trailerKeys {
		if t == k {
			return true
		}
	}
	return false
}

// sendData sends p as DATA frames within the flow-control windows, waiting
// for them to open.
func (st *h2sStream) sendData(p []byte, end bool) error {
	sc := st.sc
	for {
		sc.mu.Lock()
		for len(p) > 0 && st.err == nil && (st.sendWin <= 0 || sc.sendWin <= 0) {
			st.winWait = true
			sc.winWaiters++
			st.cond.Wait()
			st.winWait = false
			sc.winWaiters--
		}
		if st.err != nil {
			err := st.err
			sc.mu.Unlock()
			return err
		}
		n := min(int64(len(p)), st.sendWin, sc.sendWin, h2sMaxWrite)
		st.sendWin -= n
		sc.sendWin -= n
		max := sc.maxFrame
		sc.mu.Unlock()
		chunk, rest := p[:n], p[n:]
		last := end && len(rest) == 0
		sc.wmu.Lock()
		for first := true; first || len(chunk) > 0; first = false {
			m := min(len(chunk), max)
			_ = sc.wfr.WriteData(st.id, last && m == len(chunk), chunk[:m])
			chunk = chunk[m:]
		}
		err := sc.flushLocked()
		sc.wmu.Unlock()
		if err != nil {
			return err
		}
		p = rest
		if len(p) == 0 {
			return nil
		}
	}
}

// writeHeadersLocked writes a header block as HEADERS and CONTINUATION
// frames of the client's maximum size; sc.wmu is held.
func (sc *h2sConn) writeHeadersLocked(id uint32, end bool, block []byte) {
	sc.mu.Lock()
	max := sc.maxFrame
	sc.mu.Unlock()
	writeHeaderBlock(sc.wfr, id, end, block, max)
}

// h2sBody is a stream's request body: what DATA frames brought, read by
// the handler, the window given back as it reads.
type h2sBody h2sStream

func (b *h2sBody) Read(p []byte) (int, error) {
	st := (*h2sStream)(b)
	sc := st.sc
	if st.expect {
		st.sendContinue()
	}
	sc.mu.Lock()
	for st.roff == len(st.rbuf) && !st.remoteDone && st.err == nil {
		st.cond.Wait()
	}
	if st.roff < len(st.rbuf) {
		n := copy(p, st.rbuf[st.roff:])
		st.roff += n
		if st.roff == len(st.rbuf) {
			st.rbuf, st.roff = st.rbuf[:0], 0
		}
		st.unacked += int64(n)
		var send int64
		if !st.remoteDone && st.err == nil && st.unacked >= h2sStreamWin/4 {
			send, st.unacked = st.unacked, 0
			st.recvWin += send
		}
		sc.mu.Unlock()
		sc.creditConn(int64(n))
		if send > 0 {
			sc.wmu.Lock()
			_ = sc.wfr.WriteWindowUpdate(st.id, uint32(send))
			_ = sc.flushLocked()
			sc.wmu.Unlock()
		}
		return n, nil
	}
	err := st.err
	if st.remoteDone {
		err = io.EOF // all of it came
	}
	sc.mu.Unlock()
	return 0, err
}

// takeWhole reads the whole body into dst if it all came (END_STREAM)
// and is at most max bytes (wholeSource). The client sent it all, so no
// 100 (Continue) is due and no window is given back but the connection's.
func (b *h2sBody) takeWhole(dst []byte, max int) ([]byte, bool) {
	st := (*h2sStream)(b)
	sc := st.sc
	sc.mu.Lock()
	n := len(st.rbuf) - st.roff
	if !st.remoteDone || st.err != nil || n > max {
		sc.mu.Unlock()
		return dst, false
	}
	dst = append(dst, st.rbuf[st.roff:]...)
	st.rbuf, st.roff = st.rbuf[:0], 0
	st.continueDue = false
	sc.mu.Unlock()
	if n > 0 {
		sc.creditConn(int64(n))
	}
	return dst, true
}

// sendContinue sends the 100 (Continue) a request that expects one waits
// for, once, and never after the answer's headers (both are written under
// sc.wmu).
func (st *h2sStream) sendContinue() {
	sc := st.sc
	sc.mu.Lock()
	due := st.continueDue
	sc.mu.Unlock()
	if !due {
		return
	}
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.mu.Lock()
	due = st.continueDue && st.err == nil
	st.continueDue = false
	sc.mu.Unlock()
	if !due {
		return
	}
	sc.hbuf.Reset()
	appendHPACK(&sc.hbuf, ":status", "100")
	sc.writeHeadersLocked(st.id, false, sc.hbuf.Bytes())
	_ = sc.flushLocked()
}

// Close is the handler's: the stream is reset, if the client still sends,
// when the handler returns.
func (b *h2sBody) Close() error { return nil }

// dateCache is the Date header's value for one second (a response's
// headers would otherwise format it each time).
type dateCache struct {
	sec int64
	v   string
}

var lastDate atomic.Pointer[dateCache]

// httpDate returns now as an HTTP date (RFC 9110 5.6.7), formatted once a
// second.
func httpDate(now time.Time) string {
	sec := now.Unix()
	if d := lastDate.Load(); d != nil && d.sec == sec {
		return d.v
	}
	d := &dateCache{sec: sec, v: now.UTC().Format(http.TimeFormat)}
	lastDate.Store(d)
	return d.v
}
