package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// h1Server serves a listener's HTTP/1.1 connections: a loop per connection
// that reads each request with fasthttp's parser into a RequestCtx, calls
// the handler and writes its answer (issue 48). It stands where
// fasthttp's Server stood and keeps its behaviour the gateway relies on
// (keep-alive and pipelining, Expect: 100-continue, a streamed request
// body, hijacking, the read and idle timeouts, Shutdown's), with one clock
// read a request where fasthttp's takes three and none of its per-request
// bookkeeping the gateway does not use. The loop being the gateway's is
// also what lets it write an answer as it chooses, which fasthttp's
// server, writing ctx.Response itself, does not.
type h1Server struct {
	handler     h1Handler
	onError     func(*fasthttp.RequestCtx, error) // answers a request that could not be read
	name        string                            // the Server header of answers without one
	readTimeout time.Duration                     // a request's head and body, from its first byte
	idleTimeout time.Duration                     // between requests

	stop  atomic.Bool
	done  chan struct{} // closed by Shutdown
	once  sync.Once
	mu    sync.Mutex
	conns map[*h1Conn]struct{}
	open  sync.WaitGroup
}

// h1Handler serves a request of an HTTP/1.1 connection; it may lend ph to
// the call, for an endpoint's answer head to go out as it came (h1pass.go).
type h1Handler func(ctx *fasthttp.RequestCtx, ph *passHead)

// h1Conn is one connection's state: idle between requests, active while
// one is read and answered, closed by Shutdown while idle.
type h1Conn struct {
	s      *h1Server
	c      net.Conn
	rd     readDeadliner         // c's read deadlines (deadlinesOf)
	w      io.Writer             // what answers are written to: c under the wrappers that only pass writes on (writesOf)
	direct bool                  // br reads c under its wrappers, which only passed reads on (readsOf)
	src    h1Src                 // what br reads once direct, on a plaintext TCP connection
	tnb    *nbConn               // a TLS connection's socket, once past its first request (fastStepTLS)
	fastF  func(fd uintptr) bool // hc.fastStep, bound once
	fastT  func(fd uintptr) bool // hc.fastStepTLS, bound once
	n      int                   // requests read so far
	last   time.Time             // the previous request's time: its idle deadline counts from it
	parsed bool                  // the request's head was read (by fastStep), not yet served
	begun  time.Time             // fastStep waits for the rest of a head that began then
	exit   bool                  // fastStep ended the connection
	hj     func(net.Conn)        // the handler took the connection (hijack), to run after
	state  atomic.Int32
	ctx    fasthttp.RequestCtx
	br     *bufio.Reader
	bw     *bufio.Writer // while answers are written: nil between them (writer)
	body   h1Body
	hijack func(net.Conn) // set by the handler (hijack); runs after the answer
	out    answerWriter
	pass   passHead     // the answer head lent to the handler
	uri    fasthttp.URI // checkTarget's, for the hosts it parses
}

const (
	connIdle int32 = iota
	connActive
	connClosed
)

// maxUnreadBody is what the loop reads of a body the handler left unread
// to keep the connection; more, and the connection is closed (fasthttp's
// figure).
const maxUnreadBody = 256 << 10

var (
	// h1Pool keeps connections' state, their context's grown buffers
	// with it: a client that opens a connection per request costs no
	// allocation a request either.
	h1Pool = sync.Pool{New: func() any {
		hc := &h1Conn{br: bufio.NewReaderSize(nil, 8192)}
		hc.fastF, hc.fastT = hc.fastStep, hc.fastStepTLS
		return hc
	}}
	// h1Writers lends connections the buffer their answers are written
	// into, from the answer's first byte until it went out: the next
	// answer, of any connection, then finds the buffer in the cache,
	// where one buffer per connection was a cold copy target each time
	// (issue 48). A connection holds one across a wait only when the
	// socket is full, the answer streams, or answers to pipelined
	// requests wait to go out together.
	h1Writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
	// h1Conns finds a request's connection from its context, for hijack
	// and shutdownOf: the context's own fields for that are fasthttp's
	// server's.
	h1Conns sync.Map // *fasthttp.RequestCtx -> *h1Conn

	continueLine = []byte("HTTP/1.1 100 Continue\r\n\r\n")
	keepAlive    = []byte("keep-alive")
)

func newH1Server(h h1Handler, onError func(*fasthttp.RequestCtx, error), name string, read, idle time.Duration) *h1Server {
	return &h1Server{handler: h, onError: onError, name: name, readTimeout: read, idleTimeout: idle,
		done: make(chan struct{}), conns: make(map[*h1Conn]struct{})}
}

// Serve serves the connections ln accepts until it is closed.
func (s *h1Server) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		hc := h1Pool.Get().(*h1Conn)
		hc.s, hc.c, hc.rd, hc.w = s, c, deadlinesOf(c), writesOf(c)
		s.mu.Lock()
		if s.stop.Load() {
			s.mu.Unlock()
			c.Close()
			hc.s, hc.c, hc.rd, hc.w = nil, nil, nil, nil
			h1Pool.Put(hc)
			continue
		}
		s.conns[hc] = struct{}{}
		s.open.Add(1)
		s.mu.Unlock()
		go hc.serve()
	}
}

// Shutdown closes the idle connections at once and the others after their
// answer, and waits for them until ctx ends.
func (s *h1Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stop.Store(true)
	s.once.Do(func() { close(s.done) })
	for hc := range s.conns {
		if hc.state.CompareAndSwap(connIdle, connClosed) {
			hc.c.Close()
		}
	}
	s.mu.Unlock()
	all := make(chan struct{})
	go func() { s.open.Wait(); close(all) }() // ends with the last connection, ctx or not
	select {
	case <-all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (hc *h1Conn) serve() {
	s := hc.s
	defer func() {
		hijacked := hc.hj != nil
		if hijacked {
			hc.startHijack(hc.hj)
		}
		s.mu.Lock()
		delete(s.conns, hc)
		s.mu.Unlock()
		h1Conns.Delete(&hc.ctx)
		if hijacked {
			s.open.Done() // (a tunnel may still hold what was the request's: not reused)
			return
		}
		hc.c.Close()
		s.open.Done()
		hc.release()
	}()
	h1Conns.Store(&hc.ctx, hc)
	hc.ctx.Init2(hc.c, discardLogger{}, false) // for an answer before the first request (fail)
	hc.br.Reset(hc.c)
	if s.readTimeout > 0 {
		hc.last = time.Now()
		if hc.rd.SetReadDeadline(hc.last.Add(s.readTimeout)) != nil {
			return
		}
	}
	for {
		if (hc.src.nb != nil || hc.tnb != nil) && !hc.parsed {
			// Requests that come whole are served inside one raw read
			// (fastStep); it leaves the others to the loop below.
			var err error
			if hc.src.nb != nil {
				err = hc.src.nb.readEach(hc.fastF)
			} else {
				err = hc.tnb.readEach(hc.fastT)
			}
			if hc.exit || err != nil && hc.br.Buffered() == 0 {
				return // (done, taken, closed, or idle too long: as the read below would)
			}
		}
		if !hc.parsed {
			if hc.buffered() > 0 && hc.br.Buffered() == 0 {
				// Answers to pipelined requests went out together; the wait
				// for the next request must not hold them.
				if hc.flush() != nil {
					return
				}
			}
			if _, err := hc.br.Peek(1); err != nil {
				if hc.n == 0 && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					hc.fail(err) // nothing arrived in time: 408
				}
				return
			}
		}
		if !hc.state.CompareAndSwap(connIdle, connActive) {
			return // Shutdown closed it
		}
		if hc.buffered() > 0 && !hc.headBuffered() && hc.flush() != nil {
			return // answers held while the next head is awaited
		}
		keep, hijack, _ := hc.one(hc.n, false)
		if !hc.after(keep, hijack) {
			return
		}
		if !hc.direct && hc.br.Buffered() == 0 {
			if c := readsOf(hc.c); c != nil {
				var r io.Reader = c
				if nb, ok := c.(*nbConn); ok {
					hc.src = h1Src{nb: nb}
					r, hc.w = &hc.src, &hc.src
				}
				hc.br.Reset(r) // (keeps its buffer)
				hc.direct = true
			} else if nb := tlsSocketOf(hc.c); nb != nil {
				hc.tnb, hc.direct = nb, true
			}
		}
	}
}

// after ends a request served, counted, and sets the idle deadline the
// wait for the next one is under: false if the connection is to close (or
// was taken: hc.hj, which serve hands it to as it returns).
func (hc *h1Conn) after(keep bool, hijack func(net.Conn)) bool {
	hc.n++
	if hijack != nil {
		hc.hj = hijack
		return false
	}
	hc.last = hc.ctx.Time()
	hc.state.Store(connIdle)
	if !keep || hc.s.stop.Load() {
		_ = hc.flush()
		return false
	}
	// From the request's start, not the clock: its answer's time shortens
	// minutes of idle time by little, for a clock read less a request.
	return hc.s.idleTimeout <= 0 || hc.rd.SetReadDeadline(hc.last.Add(hc.s.idleTimeout)) == nil
}

// fastStep is readEach's function on a plaintext connection (nbConn): it
// serves each request whose head and body are in the reader, reads the
// socket itself (h1Src) when they are not, and waits (false) only after a
// read found nothing or less than it asked for: no read is spent before
// a wait finding nothing (issue 48). It ends (true) when the connection
// does (hc.exit, hc.hj), and for the loop to serve a request otherwise:
// one whose body is still to come (hc.parsed: its head is read), one
// whose head does not end where it seemed to, a head the reader cannot
// hold, a read that failed (the loop's read meets it again).
func (hc *h1Conn) fastStep(fd uintptr) bool {
	hc.src.fd, hc.src.raw, hc.src.drained = fd, true, false
	defer func() { hc.src.raw = false }()
	return hc.serveWhole()
}

// fastStepTLS is fastStep on a TLS connection: its tls.Conn reads the
// socket raw (nbConn.stepRead) as h1Src does, a record begun and not yet
// whole waiting in it (errWouldBlock is a temporary error to it).
func (hc *h1Conn) fastStepTLS(fd uintptr) bool {
	nb := hc.tnb
	nb.stepFD, nb.stepping, nb.drained = fd, true, false
	defer func() { nb.stepping = false }()
	return hc.serveWhole()
}

// serveWhole is fastStep's loop; br's reads return errWouldBlock once a
// read found nothing or less than it asked for, without a system call.
func (hc *h1Conn) serveWhole() bool {
	for {
		if b, _ := hc.br.Peek(hc.br.Buffered()); headEnds(b) {
			if !hc.state.CompareAndSwap(connIdle, connActive) {
				hc.exit = true // Shutdown closed it
				return true
			}
			keep, hijack, leave := hc.one(hc.n, true)
			if leave {
				hc.state.Store(connIdle) // (the loop takes it again)
				return true
			}
			if !hc.after(keep, hijack) {
				hc.exit = true
				return true
			}
			continue
		}
		if hc.buffered() > 0 && hc.flush() != nil {
			hc.exit = true // answers held while the next head is awaited
			return true
		}
		if hc.br.Buffered() == hc.br.Size() {
			return true
		}
		if _, err := hc.br.Peek(hc.br.Buffered() + 1); err == errWouldBlock {
			if hc.br.Buffered() > 0 && hc.begun.IsZero() && hc.s.readTimeout > 0 {
				// A head begun: the read timeout counts from now (one).
				hc.begun = time.Now()
				_ = hc.rd.SetReadDeadline(hc.begun.Add(hc.s.readTimeout))
			}
			return false
		} else if err != nil {
			return true
		}
	}
}

// tlsSocketOf is the socket under a TLS connection whose tls.Conn reads
// it directly (not batching: HTTP/1.1), nil if it is not such a one.
func tlsSocketOf(c net.Conn) *nbConn {
	tc, ok := c.(*tlsServerConn)
	if !ok {
		return nil
	}
	bc, ok := tc.NetConn().(*batchConn)
	if !ok || bc.on.Load() {
		return nil
	}
	nb, _ := bc.Conn.(*nbConn)
	return nb
}

// headEnds reports whether b holds a blank line: a whole head, to parse.
func headEnds(b []byte) bool {
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		b = b[i+1:]
		if len(b) > 0 && b[0] == '\n' || len(b) > 1 && b[0] == '\r' && b[1] == '\n' {
			return true
		}
	}
}

// h1Src is what the loop of a plaintext TCP connection reads and writes
// once its wrappers are done (readsOf): the connection, or, inside
// fastStep, its socket, by raw reads that return errWouldBlock instead of
// waiting and raw writes (fastStep holds the connection's read lock, so
// its descriptor stays the connection's; the HTTP/1.1 loop is its only
// writer).
type h1Src struct {
	nb      *nbConn
	fd      uintptr
	raw     bool // inside fastStep: fd is the socket
	drained bool // the last raw read found nothing, or less than it asked for
}

// Write writes p: inside fastStep by raw writes as far as the socket
// takes them at once (no lock, no readiness reset: issue 48), the rest as
// the connection writes, waiting under its write deadline.
func (s *h1Src) Write(p []byte) (int, error) {
	if !s.raw {
		return s.nb.Write(p)
	}
	var n int
	var errno syscall.Errno
	if rawWrite(s.fd, p, &n, &errno) {
		if errno != 0 {
			return n, s.nb.opError("write", errno)
		}
		return n, nil
	}
	m, err := s.nb.Write(p[n:])
	return n + m, err
}

// errWouldBlock is a raw read's EAGAIN: nothing to read yet. It is a
// temporary net.Error, which a tls.Conn returns without failing the
// connection, its record begun kept (fastStepTLS).
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "gateway: nothing to read yet" }
func (wouldBlock) Timeout() bool   { return false }
func (wouldBlock) Temporary() bool { return true }

func (s *h1Src) Read(p []byte) (int, error) {
	if !s.raw {
		return s.nb.Read(p)
	}
	return s.nb.readDrained(s.fd, p, &s.drained)
}

// readDeadliner is what the loop sets read deadlines on.
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// deadlinesOf is the connection under c's wrappers that only pass
// deadlines on (lfConn, prefixConn): two interface calls less, twice a
// request (issue 48).
func deadlinesOf(c net.Conn) readDeadliner {
	if nb, ok := under(c).(*nbConn); ok {
		return nb
	}
	return c
}

// writesOf is what answers are written to: the connection under c's
// wrappers, which only pass writes on (two interface calls less for each
// answer written; issue 48).
func writesOf(c net.Conn) io.Writer { return under(c) }

// under is c without its lfConn and prefixConn.
func under(c net.Conn) net.Conn {
	for {
		switch w := c.(type) {
		case *lfConn:
			c = w.Conn
		case *prefixConn:
			c = w.Conn
		default:
			return c
		}
	}
}

// readsOf is the connection under c's wrappers once they only pass reads
// on: an lfConn whose guard saw its first head end, over a prefixConn
// whose sniffed bytes were read. nil: not such a connection, or not yet.
// Reading it then saves the wrappers' two interface calls and the guard's
// check at each read (issue 48).
func readsOf(c net.Conn) net.Conn {
	lc, ok := c.(*lfConn)
	if !ok || !lc.lf.done { // (a guard that met a bare LF never sees its head end)
		return nil
	}
	pc, ok := lc.Conn.(*prefixConn)
	if !ok || len(pc.prefix) > 0 {
		return nil
	}
	return pc.Conn
}

// release returns hc to the pool.
func (hc *h1Conn) release() {
	hc.br.Reset(nil)
	if hc.bw != nil { // answers not sent: a flush failed, or Shutdown closed the connection
		hc.putWriter()
	}
	hc.ctx.Request.Reset()
	hc.ctx.Response.Reset()
	hc.ctx.Init2(nil, discardLogger{}, false)
	hc.s, hc.c, hc.rd, hc.w, hc.hijack, hc.direct = nil, nil, nil, nil, nil, false
	hc.src, hc.tnb, hc.n, hc.last, hc.parsed, hc.exit, hc.hj, hc.begun = h1Src{}, nil, 0, time.Time{}, false, false, nil, time.Time{}
	hc.body.reset()
	hc.state.Store(connIdle)
	h1Pool.Put(hc)
}

// one reads a request, serves it and writes its answer; keep: the
// connection may carry another; hijack: the handler took the connection.
// fast: inside fastStep, where the reader must not wait: leave says the
// loop is to serve the request instead (hc.parsed: its head is read).
func (hc *h1Conn) one(n int, fast bool) (keep bool, hijack func(net.Conn), leave bool) {
	s, ctx := hc.s, &hc.ctx
	req := &ctx.Request
	if !hc.parsed {
		// The request's time: the loop's one clock read. Bodies' buffers
		// go back to fasthttp's pool at each request's end
		// (reduceMemoryUsage), so that the next request, of any
		// connection, finds one still in the cache: one per connection
		// was a cold copy target each time (issue 48).
		ctx.Init2(hc.c, discardLogger{}, true)
		ctx.Response.Header.SetNoDefaultContentType(true)
		if n > 0 {
			// The read timeout counts from the request's first byte;
			// without one, the idle deadline no longer applies.
			var d time.Time
			if s.readTimeout > 0 {
				d = ctx.Time().Add(s.readTimeout)
				if !hc.begun.IsZero() { // fastStep saw the head begin
					d = hc.begun.Add(s.readTimeout)
				}
			}
			if hc.rd.SetReadDeadline(d) != nil {
				return false, nil, false
			}
		}
		if err := req.Header.Read(hc.br); err != nil {
			if fast && errors.Is(err, errWouldBlock) {
				return false, nil, true // the head goes on past the blank line seen (headEnds)
			}
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) { // gone: no answer
				hc.fail(err)
			}
			return false, nil, false
		}
		if err := checkTarget(&req.Header, &hc.uri); err != nil {
			hc.fail(err)
			return false, nil, false
		}
		if fast && !hc.bodyIn(&req.Header) {
			hc.parsed = true
			return false, nil, true
		}
	}
	hc.parsed, hc.begun = false, time.Time{}
	defer func() {
		hc.body.reset()
		ctx.Request.Reset()
		ctx.Response.Reset()
	}()
	http11 := req.Header.IsHTTP11()
	closeConn := req.Header.ConnectionClose()
	switch cl := req.Header.ContentLength(); {
	case cl == -2: // neither length nor chunked: no body (RFC 9112 6.3)
		if !req.Header.IsGet() && !req.Header.IsHead() {
			req.Header.SetContentLength(0)
		}
	case cl != 0:
		if req.MayContinue() {
			// fasthttp's way: the body is wanted whatever the handler does.
			if _, err := hc.writer().Write(continueLine); err != nil || hc.flush() != nil {
				return false, nil, false
			}
		}
		hc.body.start(hc.br, cl)
		req.SetBodyStream(&hc.body, cl)
		if hc.buffered() > 0 && hc.flush() != nil {
			return false, nil, false // the handler may wait for the body: answers before go out
		}
	}

	hc.pass.ok, hc.pass.req.ok = false, false
	s.handler(ctx, &hc.pass)

	if ctx.IsHead() {
		ctx.Response.SkipBody = true
	}
	hijack, hc.hijack = hc.hijack, nil
	resp := &ctx.Response
	closeConn = closeConn || resp.ConnectionClose() || hc.body.failed || s.stop.Load()
	if hijack == nil && !closeConn && !resp.IsBodyStream() && hc.body.overflows() {
		closeConn = true // decided before the head goes out, to say so in it
	}
	if !hc.pass.ok { // (writePass writes these fields itself)
		if closeConn {
			resp.SetConnectionClose()
		} else if !http11 {
			resp.Header.SetBytesV(fasthttp.HeaderConnection, keepAlive)
		}
		if len(resp.Header.Server()) == 0 && s.name != "" {
			resp.Header.SetServer(s.name)
		}
	}
	if hijack != nil {
		// The handler answers itself (upgrade.go). Even on a connection
		// that broke, the hijack runs: it ends its tunnel, and the
		// endpoint's connection with it, at once.
		_ = hc.flush()
		return false, hijack, false
	}
	var err error
	if hc.pass.ok {
		err = hc.out.writePass(hc.writer(), resp, &hc.pass, closeConn, !closeConn && !http11, s.name)
	} else {
		err = hc.out.write(hc.writer(), resp)
	}
	if err != nil {
		return false, nil, false
	}
	if hc.br.Buffered() == 0 || closeConn || !hc.body.done() {
		if hc.flush() != nil {
			return false, nil, false
		}
	}
	// What the handler left of the body is read so that it is not taken
	// for the next request; too much of it, and the connection closes.
	if !closeConn && !hc.body.discard() {
		closeConn = true
	}
	return !closeConn, nil, false
}

// bodyIn reports whether the reader holds the whole body of the request
// whose head is h, if it has one, and it is not awaiting 100 Continue.
func (hc *h1Conn) bodyIn(h *fasthttp.RequestHeader) bool {
	switch cl := h.ContentLength(); {
	case cl == 0 || cl == -2:
		return true
	case cl > 0:
		return cl <= hc.br.Buffered() && !hc.ctx.Request.MayContinue()
	}
	return false
}

// headBuffered reports whether the reader holds a whole request head.
func (hc *h1Conn) headBuffered() bool {
	b, _ := hc.br.Peek(hc.br.Buffered())
	return bytes.Contains(b, headEnd)
}

var headEnd = []byte("\r\n\r\n")

// startHijack hands the connection to f, with what the reader holds of
// it; the connection closes when f returns.
func (hc *h1Conn) startHijack(f func(net.Conn)) {
	_ = hc.c.SetDeadline(time.Time{})
	hjc := &prefixConn{Conn: hc.c} // what the reader held, then the connection (server.go)
	if n := hc.br.Buffered(); n > 0 {
		b, _ := hc.br.Peek(n)
		hjc.prefix = append([]byte(nil), b...)
	}
	go func() {
		defer hjc.Close()
		f(hjc)
	}()
}

// fail answers a request that could not be read, through the server's
// error handler, and the connection closes.
func (hc *h1Conn) fail(err error) {
	ctx := &hc.ctx
	ctx.Response.Reset()
	ctx.Response.Header.SetNoDefaultContentType(true)
	hc.s.onError(ctx, err)
	if hc.s.name != "" {
		ctx.Response.Header.SetServer(hc.s.name)
	}
	ctx.SetConnectionClose()
	if hc.out.write(hc.writer(), &ctx.Response) == nil {
		_ = hc.flush()
	}
}

// writer is the buffer answers are written into, lent by h1Writers until
// flush sends them.
func (hc *h1Conn) writer() *bufio.Writer {
	if hc.bw == nil {
		hc.bw = h1Writers.Get().(*bufio.Writer)
		hc.bw.Reset(hc.w)
	}
	return hc.bw
}

// buffered is what the writer holds of answers not yet sent.
func (hc *h1Conn) buffered() int {
	if hc.bw == nil {
		return 0
	}
	return hc.bw.Buffered()
}

// flush sends what the writer holds and gives the buffer back; one that
// failed stays (release gives it back).
func (hc *h1Conn) flush() error {
	if hc.bw == nil {
		return nil
	}
	if err := hc.bw.Flush(); err != nil {
		return err
	}
	hc.putWriter()
	return nil
}

// putWriter gives the writer back to h1Writers.
func (hc *h1Conn) putWriter() {
	hc.bw.Reset(nil)
	h1Writers.Put(hc.bw)
	hc.bw = nil
}

// checkTarget refuses what fasthttp's server refused before its handler
// ran (its URI parse, which the data path otherwise skips): a Host, or an
// absolute target's authority, that fasthttp's URI parser cannot read
// (brackets astray, two ports, a bad escape). Most hosts are a name or an
// address with a port, checked in one pass without it.
func checkTarget(h *fasthttp.RequestHeader, u *fasthttp.URI) error {
	uri := h.RequestURI()
	if len(uri) > 0 && uri[0] == '/' && plainHost(h.Host()) {
		return nil
	}
	return u.Parse(h.Host(), uri)
}

// plainHost reports whether host is letters, digits and ".-_~", with a
// port of digits after one ':' if any.
func plainHost(host []byte) bool {
	port := false
	for _, c := range host {
		switch {
		case c >= '0' && c <= '9':
		case port:
			return false
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '.', c == '-', c == '_', c == '~':
		case c == ':':
			port = true
		default:
			return false
		}
	}
	return true
}

// hijack gives the connection of the HTTP/1.1 request ctx to f once the
// handler returns, without an answer: f writes what it wants. false if ctx
// is not one of an h1Server's requests.
func hijack(ctx *fasthttp.RequestCtx, f func(net.Conn)) bool {
	v, ok := h1Conns.Load(ctx)
	if !ok {
		return false
	}
	v.(*h1Conn).hijack = f
	return true
}

// shutdownOf is closed when the server of request ctx shuts down (nil: it
// never does).
func shutdownOf(ctx *fasthttp.RequestCtx) <-chan struct{} {
	if v, ok := h1Conns.Load(ctx); ok {
		return v.(*h1Conn).s.done
	}
	return ctx.Done()
}

// h1Body is a request's body as the handler reads it: Content-Length bytes
// of the connection, or its chunks decoded (trailers read and dropped).
type h1Body struct {
	br      *bufio.Reader
	left    int64 // of a sized body; of a chunked one: of the chunk
	chunked bool
	crlf    bool // a chunk's data was read: its CRLF is next
	eof     bool
	failed  bool // a read failed: the connection cannot carry another request
	on      bool
}

func (b *h1Body) start(br *bufio.Reader, cl int) {
	*b = h1Body{br: br, on: true}
	if cl < 0 {
		b.chunked = true
	} else {
		b.left = int64(cl)
		b.eof = cl == 0
	}
}

func (b *h1Body) reset() { *b = h1Body{} }

// done reports whether the body was read to its end (or there is none).
func (b *h1Body) done() bool { return !b.on || b.eof }

// overflows reports whether more than maxUnreadBody of the body is known
// to be left.
func (b *h1Body) overflows() bool { return b.on && !b.eof && !b.chunked && b.left > maxUnreadBody }

// discard reads what is left of the body, up to maxUnreadBody; false if
// it could not be read so (too long, or broken).
func (b *h1Body) discard() bool {
	if b.done() {
		return true
	}
	if b.failed {
		return false
	}
	n, err := io.Copy(io.Discard, io.LimitReader(b, maxUnreadBody+1))
	return err == nil && n <= maxUnreadBody && b.eof
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.failed {
		return 0, errBodyBroken
	}
	if b.chunked && b.left == 0 {
		// The CRLF after a chunk's data is read with the next chunk's
		// size, not with the data: what arrived is handed on without
		// waiting for it.
		err := b.nextChunk()
		if err != nil {
			b.failed = true
			return 0, err
		}
		if b.eof {
			return 0, io.EOF
		}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	switch {
	case err == io.EOF:
		b.failed = true
		return n, io.ErrUnexpectedEOF
	case err != nil:
		b.failed = true
		return n, err
	}
	if b.left == 0 {
		if b.chunked {
			b.crlf = true
		} else {
			b.eof = true
		}
	}
	return n, nil
}

var errBodyBroken = errors.New("gateway: the request body could not be read")

// nextChunk reads a chunk's size line; the last chunk's trailers are read
// (and dropped) up to the blank line that ends the body.
func (b *h1Body) nextChunk() error {
	if b.crlf {
		if err := b.endChunk(); err != nil {
			return err
		}
		b.crlf = false
	}
	line, err := b.line()
	if err != nil {
		return err
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i] // chunk extensions are ignored
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return errors.New("gateway: bad chunk size line")
	}
	var size int64
	for _, c := range line {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return errors.New("gateway: bad chunk size " + string(line))
		}
		size = size<<4 | int64(d)
	}
	if size > 0 {
		b.left = size
		return nil
	}
	for range 100 { // trailers, to the blank line
		t, err := b.line()
		if err != nil {
			return err
		}
		if len(t) == 0 {
			b.eof = true
			return nil
		}
	}
	return errors.New("gateway: too many trailer fields")
}

// line reads a CRLF-terminated line (without it) of at most 4 KiB.
func (b *h1Body) line() ([]byte, error) {
	line, err := b.br.ReadSlice('\n')
	switch {
	case err == io.EOF:
		return nil, io.ErrUnexpectedEOF
	case errors.Is(err, bufio.ErrBufferFull) || len(line) > 4096:
		return nil, errors.New("gateway: chunk line too long")
	case err != nil:
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errors.New("gateway: chunk line not ended by CRLF")
	}
	return line[:len(line)-2], nil
}

// endChunk reads the CRLF that ends a chunk's data.
func (b *h1Body) endChunk() error {
	line, err := b.line()
	if err != nil {
		return err
	}
	if len(line) != 0 {
		return errors.New("gateway: chunk data longer than its size")
	}
	return nil
}
