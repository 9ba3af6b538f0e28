package httpapi

import (
	"context"
	"net"
	"net/http"
)

// An answer larger than net/http's 4 KiB connection buffer leaves in two
// writes: the buffer (status line, headers, the body's first bytes) when it
// fills, then the rest of the body straight from the handler's slice. Each
// write runs the TCP path and wakes the reader again: under the query bench
// (36 KB answers) the first, 4 KiB write cost nearly as much CPU as the
// 32 KiB one (pprof; docs/perf/registry.md). Connections accepted through
// JoinWrites' listener can hold the first write back and send it with the second in one
// writev. Handlers arm that only around the Write of a large body they have
// in hand (send), and whatever is held when the Write returns leaves at
// once, so nothing ever waits for a write that may not come.

// JoinWrites sets srv up to send the API's large answers in one write: it
// returns ln wrapped, for srv to serve, and lets srv's handlers reach the
// connections (through srv.ConnContext, after any it had). Connections that
// are not TCP (or are wrapped in TLS above the returned listener) are served
// as before.
func JoinWrites(srv *http.Server, ln net.Listener) net.Listener {
	prev := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		return connContext(ctx, c)
	}
	return listener{ln}
}

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && err == nil {
		return &joinConn{TCPConn: tc}, nil
	}
	return c, err
}

type connKey struct{}

// connContext lets the API's handlers reach a connection accepted by
// JoinWrites' listener.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if jc, ok := c.(*joinConn); ok {
		return context.WithValue(ctx, connKey{}, jc)
	}
	return ctx
}

// joinOf is r's connection if it can join writes, else nil.
func joinOf(r *http.Request) *joinConn {
	jc, _ := r.Context().Value(connKey{}).(*joinConn)
	return jc
}

// joinFrom is the smallest body send joins: from there the headers and
// the body cannot fit net/http's 4 KiB buffer, so it is flushed full and
// the rest follows.
const joinFrom = 4 << 10

// joinConn is a TCP connection that can hold one write back and send it
// with the next. Only its serving goroutine writes to it (net/http's HTTP/1
// server), and bytes are held only between hold and release, inside one
// send: outside it the connection is the TCPConn it embeds (ReadFrom,
// CloseWrite and Close included).
type joinConn struct {
	*net.TCPConn
	armed bool
	held  []byte
	spare []byte      // held's storage, reused
	bufs  [2][]byte   // held and the next write, for writev
	vec   net.Buffers // bufs as writev's argument (it consumes the slice)
	err   error       // a failed write of held bytes, returned from then on
}

// hold makes the next write wait for the one after it.
func (c *joinConn) hold() { c.armed = true }

// release ends hold: a write still held leaves now, alone.
func (c *joinConn) release() {
	c.armed = false
	if c.held == nil || c.err != nil {
		return
	}
	held := c.held
	c.held = nil
	if _, err := c.TCPConn.Write(held); err != nil {
		c.err = err
	}
}

func (c *joinConn) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	switch {
	case c.held != nil:
		h := len(c.held)
		c.bufs[0], c.bufs[1] = c.held, p
		c.vec = c.bufs[:]
		n, err := c.vec.WriteTo(c.TCPConn)
		c.bufs, c.held, c.armed = [2][]byte{}, nil, false
		if n < int64(h) {
			c.err = err
			return 0, err
		}
		return int(n) - h, err
	case c.armed:
		// p is the buffer net/http refills once Write returns: copy it.
		c.armed = false
		c.held = append(c.spare[:0], p...)
		c.spare = c.held
		return len(p), nil
	}
	return c.TCPConn.Write(p)
}

// holdWrites makes the next write on w's connection wait for the one after
// it; the caller must release the connection it returns (nil: no hold).
func holdWrites(w http.ResponseWriter) *joinConn {
	if sw, ok := w.(*statusWriter); ok && sw.conn != nil {
		sw.conn.hold()
		return sw.conn
	}
	return nil
}

// send writes body to w, in one write on the connection when it can.
func send(w http.ResponseWriter, body []byte) {
	if len(body) >= joinFrom {
		if c := holdWrites(w); c != nil {
			defer c.release()
		}
	}
	w.Write(body)
}
