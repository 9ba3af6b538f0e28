package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Client is the gateway's HTTP/2 client to one endpoint (h2c, or h2 over
// TLS): it speaks frames itself (x/net's Framer) instead of net/http's
// transport. A call's HEADERS (and, for a call without a body, its end) are
// written by the caller's goroutine straight to the connection; one reader
// goroutine per connection decodes the answer's frames into the stream's
// buffer, which the caller reads; a request body all in goes with the
// HEADERS, one still arriving is copied by a goroutine of its stream (the
// client may send while it reads the answer). What net/http's transport
// adds per call and this does not: its doRequest goroutine and the select
// hand-offs between it, the read loop and the caller, its per-frame
// flushes, and the answer's http.Header (roundTripFast). What it does not
// do: request trailers (the gateway sends none), server push (refused in
// SETTINGS), priorities.
type h2Client struct {
	scheme string // "http" or "https", for :scheme
	dial   func(ctx context.Context) (net.Conn, error)
	idle   time.Duration // an idle connection is closed after it
	maxAge time.Duration // max_connection_duration: a connection takes no new stream after it; 0: none
	// maxStreams is max_requests_per_connection: a connection that opened
	// so many streams takes no new one and closes once they end (Envoy
	// drains it so); 0: no limit.
	maxStreams uint32

	mu      sync.Mutex
	conns   []*h2ClientConn
	dialing *h2Dial // the dial in progress: others wait for it
}

type h2Dial struct {
	done chan struct{}
	cc   *h2ClientConn
	err  error
}

const (
	h2StreamWindow = 1 << 20 // what a stream may send before the caller reads it
	h2ConnWindow   = 1 << 30 // the connection's: credited as frames arrive
	h2MaxHeaders   = 1 << 20 // the largest answer header list accepted
)

var errH2ConnClosed = errors.New("gateway: http2 connection closed")

// errRefusedStream is a stream the endpoint did not process: reset with
// REFUSED_STREAM, or above the last stream its GOAWAY accepts (RFC 9113
// 8.7). Retried under Envoy's refused-stream condition.
var errRefusedStream = errors.New("stream refused, not processed")

// RoundTrip sends req on a connection to the endpoint and returns the
// answer once its headers arrived; its Body streams the rest, its Trailer
// is set when Body returned io.EOF. req's context bounds the whole call.
func (p *h2Client) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	st, err := p.do(&h2Request{ctx: req.Context(), method: req.Method, authority: host, path: req.URL.RequestURI(),
		std: req.Header, length: req.ContentLength, body: req.Body})
	if err != nil {
		return nil, err
	}
	st.res.Request = req
	return st.res, nil
}

// roundTripFast is RoundTrip for a request the gateway routed: its head is
// encoded straight from fasthttp's header (method, :path and :authority
// included), with no http.Request or http.Header built per call. length
// is the body's (-1: unknown); body may be nil.
// A nil ctx bounds the call by deadline alone (zero: none) without a
// context per call: an expired call fails with context.DeadlineExceeded;
// closing the answer's body ends it.
func (p *h2Client) roundTripFast(ctx context.Context, deadline time.Time, h *fasthttp.RequestHeader, te bool, length int64, body io.ReadCloser) (*h2Answer, error) {
	st, err := p.do(&h2Request{ctx: ctx, deadline: deadline, fast: h, te: te, length: length, body: body})
	if err != nil {
		return nil, err
	}
	return &st.ans, nil
}

// h2Answer is an answer to roundTripFast: its fields as the endpoint sent
// them (names lower-case, the pseudo-header fields apart), with no
// http.Header built.
type h2Answer struct {
	Status        int
	ContentLength int64 // -1: unknown
	Fields        []hpack.HeaderField
	// Trailers are set once Body returned io.EOF.
	Trailers []hpack.HeaderField
	Body     io.ReadCloser
}

// ended reports whether all of the answer is in, its trailers too: read
// to its end, the body does not wait.
func (a *h2Answer) ended() bool {
	st := a.Body.(*h2Stream)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.eof && st.err == nil
}

// fieldValue is the first value of the field of lower-case name in fs
// ("": none).
func fieldValue(fs []hpack.HeaderField, name string) string {
	for _, f := range fs {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

func (p *h2Client) do(req *h2Request) (*h2Stream, error) {
	cc, err := p.conn(req.ctx, req.deadline)
	if err != nil {
		return nil, err
	}
	return cc.roundTrip(req)
}

// h2Request is a call's head and body: the head from net/http's header
// (std, with method, authority and path) or from fasthttp's (fast).
type h2Request struct {
	ctx                     context.Context // nil: deadline bounds the call
	deadline                time.Time
	method, authority, path string
	std                     http.Header
	fast                    *fasthttp.RequestHeader
	te                      bool  // with fast: send te: trailers (fast's own te, if any, is not sent)
	length                  int64 // -1: unknown
	body                    io.ReadCloser
}

// conn returns a connection with room for one more stream (counted as
// taken), dialing one if none has.
func (p *h2Client) conn(ctx context.Context, deadline time.Time) (*h2ClientConn, error) {
	p.mu.Lock()
	for _, cc := range p.conns {
		if cc.reserve() {
			p.mu.Unlock()
			return cc, nil
		}
	}
	p.mu.Unlock()
	// Waiting for a dial, or dialing: bounded by the call's context or
	// deadline.
	if ctx == nil {
		ctx = context.Background()
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
	}
	for {
		p.mu.Lock()
		for _, cc := range p.conns {
			if cc.reserve() {
				p.mu.Unlock()
				return cc, nil
			}
		}
		if d := p.dialing; d != nil {
			p.mu.Unlock()
			select {
			case <-d.done:
				if d.err != nil {
					return nil, d.err
				}
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		d := &h2Dial{done: make(chan struct{})}
		p.dialing = d
		p.mu.Unlock()
		d.cc, d.err = p.newConn(ctx)
		p.mu.Lock()
		p.dialing = nil
		if d.err == nil {
			p.conns = append(p.conns, d.cc)
		}
		p.mu.Unlock()
		close(d.done)
		if d.err != nil {
			return nil, d.err
		}
	}
}

// remove drops a dead or drained connection from the pool.
func (p *h2Client) remove(cc *h2ClientConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.conns {
		if c == cc {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}

// CloseIdleConnections closes the connections without a call in flight.
func (p *h2Client) CloseIdleConnections() {
	p.mu.Lock()
	conns := append([]*h2ClientConn(nil), p.conns...)
	p.mu.Unlock()
	for _, cc := range conns {
		cc.closeIfIdle()
	}
}

// h2ClientConn is one HTTP/2 connection to an endpoint. Lock order: wmu,
// then mu, then a stream's mu.
type h2ClientConn struct {
	p    *h2Client
	conn net.Conn

	wmu   sync.Mutex // one writer of frames at a time; stream IDs are taken under it
	wbuf  bytes.Buffer
	wfr   *http2.Framer // writes into wbuf
	hbuf  bytes.Buffer
	lower []byte // a header name being lower-cased, under wmu

	mu         sync.Mutex
	cond       sync.Cond // the send windows grew, or a stream or the connection ended
	streams    map[uint32]*h2Stream
	nextID     uint32
	active     int // streams taken (reserved or open)
	maxStreams int // the peer's SETTINGS_MAX_CONCURRENT_STREAMS
	sendWin    int64
	initWin    int64  // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame   int    // the peer's SETTINGS_MAX_FRAME_SIZE
	goaway     bool   // no new streams
	opened     uint32 // streams taken since the dial
	err        error  // set once the connection is dead
	idleTimer  *time.Timer
	ageTimer   *time.Timer // retire, at the pool's maxAge
}

// newH2Client is a client to one endpoint dialing with dial, under a
// cluster's per-connection settings.
func newH2Client(scheme string, dial func(context.Context) (net.Conn, error), opts connOpts) *h2Client {
	return &h2Client{scheme: scheme, dial: dial, idle: opts.idleTimeout(), maxAge: opts.maxDuration, maxStreams: opts.maxRequests}
}

func (p *h2Client) newConn(ctx context.Context) (*h2ClientConn, error) {
	c, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	cc := &h2ClientConn{p: p, conn: c, streams: make(map[uint32]*h2Stream), nextID: 1,
		maxStreams: 100, sendWin: 65535, initWin: 65535, maxFrame: 16384}
	cc.cond.L = &cc.mu
	cc.wfr = http2.NewFramer(&cc.wbuf, nil)
	cc.wbuf.Write([]byte(http2.ClientPreface))
	_ = cc.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: h2MaxHeaders},
	)
	_ = cc.wfr.WriteWindowUpdate(0, h2ConnWindow-65535)
	if _, err := c.Write(cc.wbuf.Bytes()); err != nil {
		c.Close()
		return nil, fmt.Errorf("gateway: http2 preface: %w", err)
	}
	cc.wbuf.Reset()
	if p.maxAge > 0 {
		cc.mu.Lock()
		cc.ageTimer = time.AfterFunc(p.maxAge, cc.retire)
		cc.mu.Unlock()
	}
	go cc.readLoop()
	return cc, nil
}

// retire ends the connection's max_connection_duration, as Envoy drains
// it: no new stream, and it closes once its last stream ends (at once if
// it has none).
func (cc *h2ClientConn) retire() {
	cc.mu.Lock()
	cc.goaway = true
	idle := cc.active == 0
	cc.mu.Unlock()
	if idle {
		cc.close(errH2ConnClosed)
	}
}

// reserve takes a stream slot if the connection can open one more.
func (cc *h2ClientConn) reserve() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil || cc.goaway || cc.active >= cc.maxStreams || cc.nextID >= 1<<31-1 {
		return false
	}
	cc.active++
	if cc.opened++; cc.p.maxStreams > 0 && cc.opened >= cc.p.maxStreams {
		cc.goaway = true // its last: drained as it ends (releaseLocked)
	}
	if cc.idleTimer != nil {
		cc.idleTimer.Stop()
	}
	return true
}

// release gives a stream slot back; cc.mu is held.
func (cc *h2ClientConn) releaseLocked() {
	cc.active--
	if cc.active > 0 || cc.err != nil {
		return
	}
	if cc.goaway {
		go cc.close(errH2ConnClosed) // drained
		return
	}
	if cc.p.idle > 0 {
		if cc.idleTimer == nil {
			cc.idleTimer = time.AfterFunc(cc.p.idle, cc.closeIfIdle)
		} else {
			cc.idleTimer.Reset(cc.p.idle)
		}
	}
}

func (cc *h2ClientConn) closeIfIdle() {
	cc.mu.Lock()
	idle := cc.active == 0
	if idle {
		cc.goaway = true // reserve takes no stream from here on
	}
	cc.mu.Unlock()
	if idle {
		cc.close(errH2ConnClosed)
	}
}

// close ends the connection and every stream on it with err.
func (cc *h2ClientConn) close(err error) {
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	cc.err = err
	streams := make([]*h2Stream, 0, len(cc.streams))
	for _, st := range cc.streams {
		streams = append(streams, st)
	}
	clear(cc.streams)
	if cc.idleTimer != nil {
		cc.idleTimer.Stop()
	}
	if cc.ageTimer != nil {
		cc.ageTimer.Stop()
	}
	cc.cond.Broadcast()
	cc.mu.Unlock()
	cc.p.remove(cc)
	cc.conn.Close()
	for _, st := range streams {
		st.fail(err)
	}
}

// flushLocked writes the frames written to wbuf in one write of the
// connection; cc.wmu is held.
func (cc *h2ClientConn) flushLocked() error {
	if cc.wbuf.Len() == 0 {
		return nil
	}
	_, err := cc.conn.Write(cc.wbuf.Bytes())
	cc.wbuf.Reset()
	if err != nil {
		go cc.close(fmt.Errorf("gateway: http2 write: %w", err))
	}
	return err
}

// h2SkipHeader reports whether a lower-case header name is one an HTTP/2
// request must not carry (connectionSpecific), or one the client writes
// itself (host, content-length).
func h2SkipHeader(k string) bool {
	return k == "host" || k == "content-length" || connectionSpecific(k)
}

// roundTrip returns the call's stream once the answer's head is in: its
// ans, and for a call of net/http's header its res.
func (cc *h2ClientConn) roundTrip(req *h2Request) (*h2Stream, error) {
	ctx := req.ctx
	body := req.body
	if body == http.NoBody || req.length == 0 {
		body = nil
	}
	// A call without a body ends with its HEADERS: sent before the answer
	// can end (finish would reset a stream still sending).
	st := &h2Stream{cc: cc, ctx: ctx, deadline: req.deadline, sent: body == nil, std: req.fast == nil}
	st.cond.L = &st.mu
	// A body all in already goes in the same write as the headers if the
	// windows and one frame take it: no goroutine copies it (a gRPC unary
	// call's request, most often).
	var whole []byte
	inline := false
	if w, ok := body.(wholeBody); ok {
		whole, inline = w.whole()
	}

	cc.wmu.Lock()
	cc.mu.Lock()
	if cc.err != nil {
		err := cc.err
		cc.releaseLocked()
		cc.mu.Unlock()
		cc.wmu.Unlock()
		return nil, err
	}
	st.id = cc.nextID
	cc.nextID += 2
	st.sendWin = cc.initWin
	if n := int64(len(whole)); inline && n <= cc.sendWin && n <= st.sendWin && n <= int64(cc.maxFrame) {
		cc.sendWin -= n
		st.sendWin -= n
		body, st.sent = nil, true
	} else {
		whole = nil
	}
	cc.streams[st.id] = st
	cc.mu.Unlock()

	cc.hbuf.Reset()
	cc.encodeHead(req)
	cc.writeHeadersLocked(st.id, body == nil && len(whole) == 0, cc.hbuf.Bytes())
	if len(whole) > 0 {
		_ = cc.wfr.WriteData(st.id, true, whole)
	}
	err := cc.flushLocked()
	cc.wmu.Unlock()
	if err != nil {
		st.fail(err)
		return nil, err
	}
	// A cancelled or expired call resets its stream and wakes its reader.
	if ctx != nil {
		st.stop = context.AfterFunc(ctx, func() { st.abort(ctx.Err()) })
	} else if !req.deadline.IsZero() {
		st.timer = time.AfterFunc(time.Until(req.deadline), func() { st.abort(context.DeadlineExceeded) })
	}
	if body != nil {
		go st.sendBody(body)
	}
	st.mu.Lock()
	for !st.resReady {
		st.cond.Wait()
	}
	headed, err := st.headed, st.err
	st.mu.Unlock()
	if !headed {
		if err == nil {
			err = errH2ConnClosed
		}
		st.unwatch()
		st.abort(err)
		return nil, err
	}
	return st, nil
}

// wholeBody is a request body that may hold all its bytes already.
type wholeBody interface {
	// whole returns the whole body, without waiting, if it is all in
	// (ok); the body stays unread, and the bytes unchanged while the call
	// lasts.
	whole() (p []byte, ok bool)
}

// encodeHead writes a request's header block into cc.hbuf; cc.wmu is held.
func (cc *h2ClientConn) encodeHead(req *h2Request) {
	field := func(name, v string) {
		if name == "te" && !strings.EqualFold(v, "trailers") {
			return
		}
		appendHPACK(&cc.hbuf, name, v)
	}
	if h := req.fast; h != nil {
		// appendHPACK copies each field as it is given (no dynamic table),
		// so names and values may alias the header's bytes and cc.lower.
		appendHPACK(&cc.hbuf, ":method", b2s(h.Method()))
		appendHPACK(&cc.hbuf, ":scheme", cc.p.scheme)
		appendHPACK(&cc.hbuf, ":authority", b2s(h.Host()))
		appendHPACK(&cc.hbuf, ":path", b2s(h.RequestURI()))
		for k, v := range h.All() {
			cc.lower = appendLower(cc.lower[:0], k)
			if name := b2s(cc.lower); !h2SkipHeader(name) && (name != "te" || !req.te) {
				field(name, b2s(v))
			}
		}
		if req.te {
			appendHPACK(&cc.hbuf, "te", "trailers")
		}
	} else {
		appendHPACK(&cc.hbuf, ":method", req.method)
		appendHPACK(&cc.hbuf, ":scheme", cc.p.scheme)
		appendHPACK(&cc.hbuf, ":authority", req.authority)
		appendHPACK(&cc.hbuf, ":path", req.path)
		for k, vs := range req.std {
			name := lowerHeader(k)
			if h2SkipHeader(name) {
				continue
			}
			for _, v := range vs {
				field(name, v)
			}
		}
	}
	if req.length > 0 {
		var n [20]byte
		appendHPACK(&cc.hbuf, "content-length", b2s(strconv.AppendInt(n[:0], req.length, 10)))
	}
}

// b2s views b as a string without a copy; b must not change while the
// string is in use.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// appendLower appends the lower-case form of an ASCII header name.
func appendLower(dst, k []byte) []byte {
	for _, c := range k {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// writeHeadersLocked writes a header block as HEADERS and CONTINUATION
// frames of the peer's maximum size; cc.wmu is held.
func (cc *h2ClientConn) writeHeadersLocked(id uint32, end bool, block []byte) {
	cc.mu.Lock()
	max := cc.maxFrame
	cc.mu.Unlock()
	writeHeaderBlock(cc.wfr, id, end, block, max)
}

// writeHeaderBlock writes block as a HEADERS frame and as many
// CONTINUATION frames as frames of max bytes take (both sides of the
// frame-level data path: h2client.go, h2server.go).
func writeHeaderBlock(fr *http2.Framer, id uint32, end bool, block []byte, max int) {
	first := true
	for first || len(block) > 0 {
		chunk := block
		if len(chunk) > max {
			chunk = chunk[:max]
		}
		block = block[len(chunk):]
		if first {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: chunk, EndStream: end, EndHeaders: len(block) == 0})
			first = false
		} else {
			_ = fr.WriteContinuation(id, len(block) == 0, chunk)
		}
	}
}

// readLoop reads the connection's frames until it fails; it owns the
// connection's read side and ends when the connection is closed.
func (cc *h2ClientConn) readLoop() {
	fr := http2.NewFramer(nil, bufio.NewReaderSize(cc.conn, 16<<10))
	fr.SetReuseFrames() // a DATA frame is done with before the next read
	heads := newH2HeadReader(h2MaxHeaders)
	var connUnacked int64
	for {
		f, err := fr.ReadFrame()
		if hf, ok := f.(*http2.HeadersFrame); ok && err == nil {
			var head *h2Head
			if head, err = heads.read(fr, hf); err == nil {
				if st := cc.stream(head.StreamID); st != nil {
					st.onHeaders(head)
				}
				continue
			}
		}
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				if st := cc.stream(se.StreamID); st != nil {
					st.fail(fmt.Errorf("gateway: http2 stream: %w", se))
					cc.resetStream(se.StreamID, se.Code)
				}
				continue
			}
			cc.close(fmt.Errorf("gateway: http2 read: %w", err))
			return
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			if n := int64(f.Length); n > 0 {
				connUnacked += n
				if connUnacked >= h2ConnWindow/2 {
					cc.windowUpdate(0, uint32(connUnacked))
					connUnacked = 0
				}
			}
			if st := cc.stream(f.StreamID); st != nil {
				st.onData(f.Data(), int(f.Length)-len(f.Data()), f.StreamEnded())
			}
		case *http2.RSTStreamFrame:
			if st := cc.stream(f.StreamID); st != nil {
				err := error(http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode})
				if f.ErrCode == http2.ErrCodeRefusedStream {
					err = fmt.Errorf("%w: %w", errRefusedStream, err)
				}
				st.fail(fmt.Errorf("gateway: http2 stream reset by the endpoint: %w", err))
			}
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			cc.onSettings(f)
		case *http2.WindowUpdateFrame:
			cc.mu.Lock()
			if f.StreamID == 0 {
				cc.sendWin += int64(f.Increment)
			} else if st := cc.streams[f.StreamID]; st != nil {
				st.sendWin += int64(f.Increment)
			}
			cc.cond.Broadcast()
			cc.mu.Unlock()
		case *http2.PingFrame:
			if !f.IsAck() {
				cc.wmu.Lock()
				_ = cc.wfr.WritePing(true, f.Data)
				_ = cc.flushLocked()
				cc.wmu.Unlock()
			}
		case *http2.GoAwayFrame:
			cc.mu.Lock()
			cc.goaway = true
			var late []*h2Stream
			for id, st := range cc.streams {
				if id > f.LastStreamID {
					late = append(late, st)
				}
			}
			idle := cc.active == 0
			cc.mu.Unlock()
			cc.p.remove(cc)
			for _, st := range late {
				st.fail(fmt.Errorf("gateway: http2 endpoint's GOAWAY (%v): %w", f.ErrCode, errRefusedStream))
			}
			if idle {
				cc.close(errH2ConnClosed)
				return
			}
		case *http2.PushPromiseFrame:
			cc.close(errors.New("gateway: http2 push promise, though push was disabled"))
			return
		}
	}
}

func (cc *h2ClientConn) stream(id uint32) *h2Stream {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.streams[id]
}

func (cc *h2ClientConn) onSettings(f *http2.SettingsFrame) {
	cc.mu.Lock()
	_ = f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			cc.maxStreams = int(min(s.Val, 1<<20))
		case http2.SettingInitialWindowSize:
			d := int64(s.Val) - cc.initWin
			cc.initWin = int64(s.Val)
			for _, st := range cc.streams {
				st.sendWin += d
			}
		case http2.SettingMaxFrameSize:
			cc.maxFrame = int(s.Val)
		}
		return nil
	})
	cc.cond.Broadcast()
	cc.mu.Unlock()
	cc.wmu.Lock()
	_ = cc.wfr.WriteSettingsAck()
	_ = cc.flushLocked()
	cc.wmu.Unlock()
}

func (cc *h2ClientConn) windowUpdate(id uint32, n uint32) {
	cc.wmu.Lock()
	_ = cc.wfr.WriteWindowUpdate(id, n)
	_ = cc.flushLocked()
	cc.wmu.Unlock()
}

func (cc *h2ClientConn) resetStream(id uint32, code http2.ErrCode) {
	cc.wmu.Lock()
	_ = cc.wfr.WriteRSTStream(id, code)
	_ = cc.flushLocked()
	cc.wmu.Unlock()
}

// h2Stream is one call on an h2ClientConn; it is the answer's Body.
type h2Stream struct {
	cc       *h2ClientConn
	ctx      context.Context // the call's, or nil
	deadline time.Time       // without ctx: when the call expires (zero: never)
	id       uint32
	sendWin  int64       // cc.mu
	stop     func() bool // the context's AfterFunc; nil: none
	timer    *time.Timer // without a context, the deadline's; nil: none
	std      bool        // RoundTrip's: the answer as an http.Response too (res)

	mu       sync.Mutex
	cond     sync.Cond // data, the end, or a failure
	headed   bool      // the answer's head is in (ans)
	ans      h2Answer
	res      *http.Response // with std
	buf      []byte
	bufp     *[]byte // the buffer in h2DataBufs buf started in (or grew from)
	off      int
	eof      bool  // the answer ended (END_STREAM)
	err      error // the call failed
	sent     bool  // the request's end was written
	done     bool  // removed from the connection
	unacked  int   // bytes read since the last WINDOW_UPDATE
	resReady bool  // the answer's head, or the failure, is in: RoundTrip returns

	// The answer's fields and trailers, when they fit (an answer's fields
	// have room for two more: the gateway adds Via and X-Request-Id).
	head [8]hpack.HeaderField
	tail [3]hpack.HeaderField
}

// onHeaders takes the answer's headers or its trailers; the reader's
// goroutine calls it.
func (st *h2Stream) onHeaders(f *h2Head) {
	st.mu.Lock()
	if !st.headed {
		status, err := strconv.Atoi(f.PseudoValue("status"))
		if err != nil || status < 100 {
			st.mu.Unlock()
			st.fail(errors.New("gateway: http2 answer without a valid :status"))
			st.cc.resetStream(st.id, http2.ErrCodeProtocol)
			return
		}
		if status < 200 && status != 101 {
			st.mu.Unlock() // informational: the answer follows
			return
		}
		a := &st.ans
		a.Status, a.ContentLength, a.Body = status, -1, st
		a.Fields = keepFields(st.head[:0], f.RegularFields(), len(st.head)-2)
		if v := fieldValue(a.Fields, "content-length"); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				a.ContentLength = n
			}
		}
		if f.StreamEnded() {
			a.ContentLength = 0
		}
		if st.std {
			st.res = &http.Response{Status: statusLine(status), StatusCode: status, Proto: "HTTP/2.0", ProtoMajor: 2,
				Header: stdHeaderOf(a.Fields), ContentLength: a.ContentLength, Body: st}
		}
		st.headed = true
		st.eof = f.StreamEnded()
		st.readyLocked()
	} else {
		// Trailers: they end the stream.
		st.ans.Trailers = keepFields(st.tail[:0], f.RegularFields(), len(st.tail))
		if st.std {
			st.res.Trailer = stdHeaderOf(st.ans.Trailers)
		}
		st.eof = true
	}
	ended := st.eof
	st.cond.Broadcast()
	st.mu.Unlock()
	if ended {
		st.finish()
	}
}

// keepFields copies fs (the reader's, reused) into dst, of room for max,
// or into a new slice when they do not fit.
func keepFields(dst, fs []hpack.HeaderField, max int) []hpack.HeaderField {
	if len(fs) > max {
		return append([]hpack.HeaderField(nil), fs...)
	}
	return append(dst, fs...)
}

// stdHeaderOf is fields as an http.Header, its names canonical.
func stdHeaderOf(fs []hpack.HeaderField) http.Header {
	h := make(http.Header, len(fs))
	vals := make([]string, len(fs)) // one array for the values (a repeated name's append copies)
	for i, f := range fs {
		k := canonicalHeader(f.Name)
		if vs := h[k]; len(vs) > 0 {
			h[k] = append(vs, f.Value)
		} else {
			vals[i] = f.Value
			h[k] = vals[i : i+1 : i+1]
		}
	}
	return h
}

// onData buffers an answer's bytes; pad is the padding, credited back at
// once.
func (st *h2Stream) onData(p []byte, pad int, end bool) {
	st.mu.Lock()
	if !st.headed || st.eof || st.err != nil {
		st.mu.Unlock()
		if !st.headed {
			st.fail(errors.New("gateway: http2 DATA before the answer's headers"))
			st.cc.resetStream(st.id, http2.ErrCodeProtocol)
		}
		return
	}
	if st.off > 0 && st.off == len(st.buf) {
		st.buf, st.off = st.buf[:0], 0
	}
	if st.bufp == nil && st.buf == nil && len(p) <= h2DataBuf {
		st.bufp = h2DataBufs.Get().(*[]byte)
		st.buf = (*st.bufp)[:0]
	}
	st.buf = append(st.buf, p...)
	st.unacked += pad
	st.eof = end
	st.cond.Broadcast()
	st.mu.Unlock()
	if end {
		st.finish()
	}
}

// h2DataBufs are the buffers of answers' first DATA frames: most
// answers fit one, given back when it is read to the end.
var h2DataBufs = sync.Pool{New: func() any { b := make([]byte, 0, h2DataBuf); return &b }}

const h2DataBuf = 4 << 10

// readyLocked wakes RoundTrip; st.mu is held.
func (st *h2Stream) readyLocked() {
	if !st.resReady {
		st.resReady = true
		st.cond.Broadcast()
	}
}

// finish removes a stream whose answer ended from its connection; a
// request still being sent is reset (the endpoint does not want it).
func (st *h2Stream) finish() {
	cc := st.cc
	cc.mu.Lock()
	if st.done {
		cc.mu.Unlock()
		return
	}
	st.done = true
	delete(cc.streams, st.id)
	cc.releaseLocked()
	cc.cond.Broadcast()
	cc.mu.Unlock()
	st.mu.Lock()
	sent := st.sent
	st.mu.Unlock()
	if !sent {
		cc.resetStream(st.id, http2.ErrCodeCancel)
	}
}

// fail ends the stream with err (no reset sent).
func (st *h2Stream) fail(err error) {
	st.mu.Lock()
	if st.err == nil && !st.eof {
		st.err = err
	}
	st.readyLocked()
	st.cond.Broadcast()
	st.mu.Unlock()
	cc := st.cc
	cc.mu.Lock()
	if !st.done {
		st.done = true
		delete(cc.streams, st.id)
		cc.releaseLocked()
	}
	cc.cond.Broadcast()
	cc.mu.Unlock()
}

// abort ends a stream the gateway gives up on: it is reset unless both
// sides already ended.
func (st *h2Stream) abort(err error) {
	st.mu.Lock()
	both := st.eof && st.sent
	if st.err == nil && !st.eof {
		st.err = err
	}
	st.readyLocked()
	st.cond.Broadcast()
	st.mu.Unlock()
	cc := st.cc
	cc.mu.Lock()
	removed := !st.done
	if removed {
		st.done = true
		delete(cc.streams, st.id)
		cc.releaseLocked()
	}
	cc.cond.Broadcast()
	cc.mu.Unlock()
	if removed && !both {
		cc.resetStream(st.id, http2.ErrCodeCancel)
	}
}

// Read reads the answer's body; the caller's goroutine calls it.
func (st *h2Stream) Read(p []byte) (int, error) {
	st.mu.Lock()
	for st.off == len(st.buf) && !st.eof && st.err == nil {
		st.cond.Wait()
	}
	if st.off < len(st.buf) {
		n := copy(p, st.buf[st.off:])
		st.off += n
		st.unacked += n
		if st.eof && st.off == len(st.buf) && st.bufp != nil {
			// All of it read: no DATA comes after the end.
			h2DataBufs.Put(st.bufp)
			st.buf, st.bufp, st.off = nil, nil, 0
		}
		var credit int
		if st.unacked >= h2StreamWindow/2 && !st.eof {
			credit, st.unacked = st.unacked, 0
		}
		st.mu.Unlock()
		if credit > 0 {
			st.cc.windowUpdate(st.id, uint32(credit))
		}
		return n, nil
	}
	err := st.err
	if err == nil {
		err = io.EOF
	}
	st.mu.Unlock()
	return 0, err
}

// statusLine is an http.Response's Status for code.
func statusLine(code int) string {
	if code == http.StatusOK {
		return "200 OK"
	}
	return strconv.Itoa(code) + " " + http.StatusText(code)
}

// ctxErr is the call's context's error, or without one
// context.DeadlineExceeded once its deadline passed.
func (st *h2Stream) ctxErr() error {
	if st.ctx != nil {
		return st.ctx.Err()
	}
	if !st.deadline.IsZero() && !time.Now().Before(st.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

var errH2BodyClosed = errors.New("gateway: http2 answer body closed")

// Close ends the caller's interest in the answer: a stream not ended
// both ways is reset.
func (st *h2Stream) Close() error {
	st.unwatch()
	st.abort(errH2BodyClosed)
	return nil
}

// unwatch stops what would end the call at its context's end or deadline.
func (st *h2Stream) unwatch() {
	if st.stop != nil {
		st.stop()
	}
	if st.timer != nil {
		st.timer.Stop()
	}
}

// sendBody copies the request body to the stream within the send windows;
// the stream owns the goroutine, which ends at the body's end or error, or
// once the stream ended (checked after each read).
func (st *h2Stream) sendBody(body io.ReadCloser) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	cc := st.cc
	for {
		n, rerr := body.Read(buf)
		end := rerr == io.EOF
		if rerr != nil && !end {
			if err := st.ctxErr(); err != nil {
				rerr = err // the body ended because the call did
			}
			st.abort(fmt.Errorf("gateway: request body: %w", rerr))
			return
		}
		chunk := buf[:n]
		for len(chunk) > 0 || end {
			cc.mu.Lock()
			for !st.done && cc.err == nil && len(chunk) > 0 && (cc.sendWin <= 0 || st.sendWin <= 0) {
				cc.cond.Wait()
			}
			if st.done || cc.err != nil {
				cc.mu.Unlock()
				return
			}
			take := int64(len(chunk))
			take = min(take, cc.sendWin, st.sendWin, int64(cc.maxFrame))
			cc.sendWin -= take
			st.sendWin -= take
			cc.mu.Unlock()
			last := end && int(take) == len(chunk)
			if last {
				st.mu.Lock()
				st.sent = true // before the write: the answer may end at once
				st.mu.Unlock()
			}
			cc.wmu.Lock()
			_ = cc.wfr.WriteData(st.id, last, chunk[:take])
			err := cc.flushLocked()
			cc.wmu.Unlock()
			if err != nil {
				st.fail(err)
				return
			}
			chunk = chunk[take:]
			if last {
				return
			}
		}
	}
}

// lowerHeader is an HTTP/2 header name for a canonical one.
func lowerHeader(k string) string {
	if l, ok := h2Lower[k]; ok {
		return l
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(k)
		}
	}
	return k
}

// canonicalHeader is the canonical form of an HTTP/2 header name.
func canonicalHeader(k string) string {
	if c, ok := h2Canonical[k]; ok {
		return c
	}
	return http.CanonicalHeaderKey(k)
}

var h2Lower, h2Canonical = func() (map[string]string, map[string]string) {
	lower, canon := map[string]string{}, map[string]string{}
	for _, k := range []string{"Accept", "Accept-Encoding", "Authorization", "Cache-Control", "Content-Encoding",
		"Content-Length", "Content-Type", "Cookie", "Date", "Etag", "Grpc-Accept-Encoding", "Grpc-Encoding",
		"Grpc-Message", "Grpc-Status", "Grpc-Status-Details-Bin", "Grpc-Timeout", "Last-Modified", "Location",
		"Server", "Set-Cookie", "Te", "Traceparent", "Tracestate", "User-Agent", "Vary", "Via", "X-Request-Id",
		"X-Forwarded-For", "X-Forwarded-Proto", "X-Envoy-Attempt-Count", "X-B3-Traceid", "X-B3-Spanid", "X-B3-Sampled"} {
		l := strings.ToLower(k)
		lower[k], canon[l] = l, k
	}
	return lower, canon
}()
