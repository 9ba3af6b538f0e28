package gateway

import (
	"bufio"
	"bytes"
	"net"
	"sync"
	"syscall"

	"github.com/valyala/fasthttp"
)

// upConn is a plaintext upstream connection of an HTTP/1.1 pool, which
// sends a small request and waits for its answer without the read that
// finds nothing: Go's net.Conn tries a read first, and right after a
// request it returns EAGAIN (the endpoint has not answered yet), a system
// call per call spent for nothing (issue 48: 3.5 reads per request, nginx
// 2). Here the request is written inside the connection's RawConn.Read,
// after the poller's readiness was reset, so the wait that follows ends
// with the answer's first bytes, which the next read then finds.
// One call uses a connection at a time (the pool's), so its state needs no
// lock.
type upConn struct {
	*nbConn                       // its reads and writes are raw system calls (nbconn.go)
	step    func(fd uintptr) bool // c.write, bound once: no allocation a call
	req     *reqBuf               // the request, serialized; lent by reqBufs until sent
	out     []byte                // what step writes
	sent    int
	werr    syscall.Errno
	todo    bool // step has not written yet
}

// reqBuf is where a request is serialized before it is sent.
type reqBuf struct {
	buf bytes.Buffer
	bw  *bufio.Writer // into buf
}

// reqBufs lends connections their requests' buffer from the request's
// first byte until it went out, before the wait for the answer: the next
// call, on any connection, finds it in the cache, where a buffer per
// connection was a cold copy target at each call (issue 48).
var reqBufs = sync.Pool{New: func() any {
	rb := &reqBuf{}
	rb.bw = bufio.NewWriterSize(&rb.buf, 4096)
	return rb
}}

// release gives the request's buffer back.
func (c *upConn) release() {
	if c.req != nil {
		reqBufs.Put(c.req)
		c.req, c.out = nil, nil
	}
}

// upConnMaxBody bounds the bodies sent through buf: a larger one (a
// buffered upload) goes the usual way, so that no connection keeps a large
// buffer.
const upConnMaxBody = 8 << 10

func newUpConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	nb, err := newNB(tc)
	if err != nil {
		return c
	}
	nb.lazy = true // roundTrip sets a deadline per call (nbconn.go)
	u := &upConn{nbConn: nb}
	u.step = u.write
	return u
}

// sendAwait writes req and returns once its answer can be read (or the
// read deadline passed). Not for a streamed body. ph: as writeRequest's.
func (c *upConn) sendAwait(req *fasthttp.Request, ph *passHead) error {
	rb := reqBufs.Get().(*reqBuf)
	c.req = rb
	defer c.release()
	rb.buf.Reset()
	rb.bw.Reset(&rb.buf)
	if err := writeRequest(rb.bw, req, ph); err != nil {
		return err
	}
	if err := rb.bw.Flush(); err != nil {
		return err
	}
	c.out, c.sent, c.werr, c.todo = rb.buf.Bytes(), 0, 0, true
	// Again if the armed deadline ended the wait early (rawRead): write
	// is then done with the request, or has not started it.
	err := c.rawRead(c.step)
	switch {
	case c.werr != 0:
		return c.opError("write", c.werr)
	case err != nil:
		return err
	case c.out != nil && c.sent < len(c.out):
		// The socket's buffer was full: the rest the usual way (its write
		// deadline applies), then the usual read.
		_, err = c.nbConn.Write(c.out[c.sent:])
		return err
	}
	return nil
}

// write is RawConn.Read's function: at its first call it writes the
// request (false: wait for readability); at the next, the answer can be
// read (true). A write it cannot finish ends the wait at once.
func (c *upConn) write(fd uintptr) bool {
	if !c.todo {
		return true
	}
	c.todo = false
	if !rawWrite(fd, c.out, &c.sent, &c.werr) || c.werr != 0 {
		return true // EAGAIN (the rest the usual way) or failed
	}
	c.release() // sent: the buffer is not held through the wait
	return false
}
