package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// roundTrip is one HTTP/1.1 exchange with an endpoint over a connection of
// pool (uppool.go), the request written and the answer's head read on the
// calling goroutine (no goroutine hand-off), except for the answer's
// body, which it reads whole only when its length is known and at most
// bufferedResponseMax (no allocation: the fast path); any other body
// becomes an upBody, which the server streams to the client.
// (fasthttp's StreamResponseBody streams every body, at four allocations a
// call.) retry says whether nothing of an answer was read. ph, if not nil,
// takes the answer's head when it is one passHead keeps (h1pass.go): resp
// then has only its status, Content-Length and body.
func roundTrip(pool *upPool, req *fasthttp.Request, resp *fasthttp.Response, ph *passHead, now, deadline time.Time, idle time.Duration) (retry bool, err error) {
	if ph != nil {
		ph.ok = false
	}
	var wait time.Duration
	if !deadline.IsZero() {
		if wait = deadline.Sub(now); wait <= 0 {
			return false, fasthttp.ErrTimeout
		}
	}
	cc, err := pool.acquire(wait)
	for i := 0; err == nil && connExpired(cc.c, now) && i < maxExpired; i++ {
		pool.close(cc) // past its max_connection_duration
		cc, err = pool.acquire(wait)
	}
	if err != nil {
		return false, err
	}
	conn := cc.c
	// A request without a streamed body is written at once: one deadline,
	// the idle one included, bounds its write and the wait for the
	// answer's head (a deadline set is a runtime timer changed: one per
	// call, not two).
	streamed := req.IsBodyStream()
	d := deadline
	if !streamed {
		d = idleDeadline(now, deadline, idle)
	}
	if err = conn.SetDeadline(d); err != nil {
		pool.close(cc)
		return true, err
	}
	if uc, ok := conn.(*upConn); ok && !streamed && len(req.Body()) <= upConnMaxBody {
		// Sent, and the answer's first bytes are in (upconn.go).
		err = uc.sendAwait(req, ph)
	} else {
		bw := cc.writer()
		err = writeRequest(bw, req, ph)
		if err == nil {
			err = bw.Flush()
		}
	}
	if err != nil {
		pool.close(cc)
		return true, timeoutErr(err)
	}
	// Waiting for the answer's head is bounded by the stream idle timeout
	// (Envoy's stream_idle_timeout) too, and so is each read of its body
	// (upBody). Sending is not: a streamed request body that stalls meets
	// the client side's read timeout.
	if idle > 0 && streamed {
		if err = conn.SetReadDeadline(idleDeadline(time.Now(), deadline, idle)); err != nil {
			pool.close(cc)
			return true, err
		}
	}
	resp.Header.DisableNormalizing()
	resp.Header.SetNoDefaultContentType(true)
	br := cc.br
	if ph != nil {
		// A read error is left to fasthttp's Read, which meets it again.
		if _, perr := br.Peek(1); perr == nil && ph.take(br, req.Header.IsHead()) {
			// Its body, if any, is read whole (scanPassHead took only
			// such answers).
			resp.SetStatusCode(ph.status)
			if ph.bodyless {
				resp.SkipBody = true
			} else {
				resp.Header.SetContentLength(ph.cl)
				if err = resp.ReadBody(br, 0); err != nil {
					pool.close(cc)
					return false, timeoutErr(err)
				}
			}
			if req.ConnectionClose() || ph.close || connSpent(conn, now) {
				pool.close(cc)
			} else {
				pool.release(cc)
			}
			ph.ok = true
			return false, nil
		}
	}
	for {
		if err = resp.Header.Read(br); err != nil {
			pool.close(cc)
			return true, timeoutErr(err)
		}
		if s := resp.StatusCode(); s < 100 || s > 199 || s == fasthttp.StatusSwitchingProtocols {
			break
		}
	}
	closeConn := req.ConnectionClose() || resp.ConnectionClose() || connSpent(conn, now)
	s, cl := resp.StatusCode(), resp.Header.ContentLength()
	switch {
	case req.Header.IsHead() || s < 200 || s == fasthttp.StatusNoContent || s == fasthttp.StatusNotModified:
		resp.SkipBody = true
	case cl >= 0 && cl <= bufferedResponseMax:
		if err = resp.ReadBody(br, 0); err != nil {
			pool.close(cc)
			return false, timeoutErr(err)
		}
	default:
		b := &upBody{h: &resp.Header, left: int64(cl), conn: conn, deadline: deadline, idle: idle}
		switch {
		case cl >= 0:
			b.r = io.LimitReader(br, int64(cl))
		case cl == -1:
			b.r, b.chunked, b.br = httputil.NewChunkedReader(br), true, br
		default: // no length: the body ends with the connection
			b.r, b.left, closeConn, cl = br, -1, true, -1
			if !resp.Header.IsHTTP11() {
				asHTTP11(&resp.Header)
			}
		}
		b.release = func(reuse bool) {
			if reuse && !closeConn {
				pool.release(cc)
			} else {
				pool.close(cc)
			}
		}
		resp.SetBodyStream(b, cl)
		return false, nil
	}
	if closeConn {
		pool.close(cc)
	} else {
		pool.release(cc)
	}
	return false, nil
}

// maxExpired bounds the expired idle connections one call closes before
// it takes one anyway (the next calls close the rest).
const maxExpired = 16

// writeRequest writes req, its head as the client sent it if ph's passReq
// holds it (h1passreq.go).
func writeRequest(w *bufio.Writer, req *fasthttp.Request, ph *passHead) error {
	if ph != nil && ph.req.ok {
		return ph.req.write(w, &req.Header)
	}
	return req.Write(w)
}

// asHTTP11 makes an HTTP/1.0 answer's head an HTTP/1.1 one: the server
// sends a body of unknown length to the client chunked, which an HTTP/1.0
// head would leave without its Transfer-Encoding (the client then waits
// for a close that never comes on a keep-alive connection). Go's TLS server
// answers a plaintext request so ("HTTP/1.0 400 ... to an HTTPS server").
func asHTTP11(h *fasthttp.ResponseHeader) {
	code, msg := h.StatusCode(), append([]byte(nil), h.StatusMessage()...)
	var kv [][2][]byte
	for k, v := range h.All() {
		kv = append(kv, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v...)})
	}
	h.Reset()
	h.DisableNormalizing()
	h.SetNoDefaultContentType(true)
	h.SetStatusCode(code)
	h.SetStatusMessage(msg)
	for _, p := range kv {
		h.AddBytesKV(p[0], p[1])
	}
}

func timeoutErr(err error) error {
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return fasthttp.ErrTimeout
	}
	return err
}

// upBody is an HTTP/1.1 answer's body read from its upstream connection
// while the server writes it to the client. At its end the upstream's
// trailers join the answer's (h) and the connection goes back to its pool;
// closed before its end, the connection is closed. The server reads and
// closes it on the client connection's goroutine.
type upBody struct {
	r       io.Reader
	br      *bufio.Reader // of a chunked body: its trailers follow it
	h       *fasthttp.ResponseHeader
	left    int64 // bytes of a body of known length still to read; -1: unknown
	chunked bool
	release func(reuse bool)
	ended   bool // read to its end
	tail    streamTail
	// conn is the upstream connection, whose read deadline each read
	// moves when idle (the stream idle timeout) is set.
	conn     net.Conn
	deadline time.Time
	idle     time.Duration
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.ended {
		return 0, io.EOF
	}
	if b.idle > 0 {
		_ = b.conn.SetReadDeadline(idleDeadline(time.Now(), b.deadline, b.idle))
	}
	n, err := b.r.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	switch {
	case err == io.EOF && b.left > 0:
		err = io.ErrUnexpectedEOF // the upstream ended before its Content-Length
	case err == io.EOF && b.chunked:
		if terr := b.h.ReadTrailer(b.br); terr != nil {
			err = terr
			break
		}
		b.ended = true
	case err == io.EOF:
		b.ended = true
	case err == nil && b.left == 0 && !b.chunked:
		b.ended, err = true, io.EOF
	}
	if err != nil && err != io.EOF {
		err = timeoutErr(err)
	}
	b.tail.read(n, err)
	return n, err
}

// WriteTo copies the body to w in 64 KiB reads (fasthttp.BodyWriterTo).
func (b *upBody) WriteTo(w io.Writer) (int64, error) { return copyLarge(w, b) }

// SupportsBodyWriteTo: a body of known length is copied in large reads; a
// chunked one is read and flushed chunk by chunk by the server, so that a
// stream's events (SSE) go out as they come.
func (b *upBody) SupportsBodyWriteTo() bool { return !b.chunked }

// CloseWithError ends the body: called by the server once it wrote the
// answer, or failed to (werr).
func (b *upBody) CloseWithError(werr error) error {
	if b.release != nil {
		b.release(b.ended && werr == nil)
		b.release = nil
		b.tail.end(b.h)
	}
	return nil
}

var (
	_ fasthttp.ReadCloserWithError = (*upBody)(nil)
	_ fasthttp.BodyWriterTo        = (*upBody)(nil)
)

// idleDeadline is the earlier of deadline (zero: none) and idle from now
// (0: none); zero when neither bounds.
func idleDeadline(now, deadline time.Time, idle time.Duration) time.Time {
	if idle <= 0 {
		return deadline
	}
	if d := now.Add(idle); deadline.IsZero() || d.Before(deadline) {
		return d
	}
	return deadline
}

// idleWatch cancels an HTTP/2 stream that moved no byte either way for
// its idle time: touch re-arms it, stop disarms it. Its methods accept nil
// (no stream idle timeout).
type idleWatch struct {
	t     *time.Timer
	idle  time.Duration
	fired atomic.Bool
}

func newIdleWatch(idle time.Duration, cancel context.CancelFunc) *idleWatch {
	w := &idleWatch{idle: idle}
	w.t = time.AfterFunc(idle, func() {
		w.fired.Store(true)
		cancel()
	})
	return w
}

func (w *idleWatch) touch() {
	if w != nil {
		w.t.Reset(w.idle)
	}
}

func (w *idleWatch) stop() {
	if w != nil {
		w.t.Stop()
	}
}

// fired reports whether the watch cancelled its stream.
func (w *idleWatch) hasFired() bool { return w != nil && w.fired.Load() }

// touchReader re-arms an idle watch at each read of a request body sent
// up, so that a long upload is not idle.
type touchReader struct {
	r io.Reader
	w *idleWatch
}

func (t touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.w.touch()
	}
	return n, err
}
