package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/valyala/fasthttp"
)

// answerWriter writes answers to a connection's writer: as fasthttp's
// Response.Write does, but for their Date. Only fasthttp's own server can
// keep Response.Write from putting the current time in Date in place of
// the endpoint's (the flag is unexported, and Reset clears it), and a
// proxy passes an answer's Date on (RFC 9110 6.6.1). The head is
// fasthttp's, with the Date line it puts after the status and Server
// lines made the answer's own, or taken out. Its fields are kept between
// answers: no allocation an answer.
type answerWriter struct {
	head  []byte
	fixed fixedWriter
	chunk chunkWriter
}

func (a *answerWriter) write(w *bufio.Writer, resp *fasthttp.Response) error {
	h := &resp.Header
	send := !resp.SkipBody && !noBodyStatus(h.StatusCode())
	if resp.IsBodyStream() {
		return a.writeStream(w, resp, send)
	}
	body := resp.Body()
	if send || len(body) > 0 {
		h.SetContentLength(len(body))
	}
	if send && hasTrailers(h) {
		h.SetContentLength(-1)
		if err := a.writeHead(w, h); err != nil {
			return err
		}
		if len(body) > 0 {
			if err := writeChunk(w, body); err != nil {
				return err
			}
		}
		_, err := w.WriteString("0\r\n")
		if err == nil {
			_, err = w.Write(h.TrailerHeader())
		}
		return err
	}
	if err := a.writeHead(w, h); err != nil {
		return err
	}
	if send {
		_, err := w.Write(body)
		return err
	}
	return nil
}

// writePass writes an answer whose head p holds (h1pass.go), its body
// resp's; closing and keepAlive say what its Connection field is to say,
// server is its Server unless it has one.
func (a *answerWriter) writePass(w *bufio.Writer, resp *fasthttp.Response, p *passHead, closing, keepAlive bool, server string) error {
	if err := p.writeHead(w, &a.head, closing, keepAlive, server); err != nil {
		return err
	}
	if resp.SkipBody || p.bodyless {
		return nil
	}
	_, err := w.Write(resp.Body())
	return err
}

// writeStream writes an answer whose body streams: of the length its head
// says (a body that says otherwise is an error), else chunked and flushed
// chunk by chunk, its trailers after the last. The stream is closed with
// the write's error, as fasthttp does (upBody.CloseWithError).
func (a *answerWriter) writeStream(w *bufio.Writer, resp *fasthttp.Response, send bool) error {
	h := &resp.Header
	cl := h.ContentLength()
	if cl < 0 {
		if lr, ok := resp.BodyStream().(*io.LimitedReader); ok && int64(int(lr.N)) == lr.N {
			cl = int(lr.N)
			h.SetContentLength(cl)
		}
	}
	if cl < 0 {
		h.SetContentLength(-1)
	}
	if err := a.writeHead(w, h); err != nil {
		_ = resp.CloseBodyStream()
		return err
	}
	if !send {
		return resp.CloseBodyStream()
	}
	if cl >= 0 {
		a.fixed = fixedWriter{w: w, left: int64(cl)}
		defer func() { a.fixed = fixedWriter{} }()
		err := resp.BodyWriteTo(&a.fixed)
		switch {
		case err != nil:
			return err
		case a.fixed.over:
			return errBodyTooLong
		case a.fixed.left != 0:
			return fmt.Errorf("gateway: answer body %d bytes short of its Content-Length", a.fixed.left)
		}
		return nil
	}
	a.chunk = chunkWriter{w: w}
	defer func() { a.chunk = chunkWriter{} }()
	if err := resp.BodyWriteTo(&a.chunk); err != nil {
		return err
	}
	if _, err := w.WriteString("0\r\n"); err != nil {
		return err
	}
	_, err := w.Write(h.TrailerHeader())
	return err
}

var errBodyTooLong = errors.New("gateway: answer body longer than its Content-Length")

var (
	crlf     = []byte("\r\n")
	dateLine = []byte("Date: ")
)

// writeHead writes h's head, its Date the answer's own (or none). The
// head is built in w's free space when there is room (as fasthttp's
// Response.Write builds it), else in a.head, and the Date line fasthttp
// puts after the status and Server lines is overwritten in place when the
// answer's own Date has its length, as an IMF-fixdate always has (RFC
// 9110 5.6.7).
func (a *answerWriter) writeHead(w *bufio.Writer, h *fasthttp.ResponseHeader) error {
	var b []byte
	inW := false // b is w's free space: w's own writes overwrite it
	if avail := w.AvailableBuffer(); cap(avail) >= 2048 {
		b = h.AppendBytes(avail)
		inW = len(b) <= cap(avail)
	} else {
		b = h.AppendBytes(a.head[:0])
	}
	if !inW {
		a.head = b
	}
	i := bytes.IndexByte(b, '\n') + 1
	if len(h.Server()) > 0 {
		i += bytes.IndexByte(b[i:], '\n') + 1
	}
	if !bytes.HasPrefix(b[i:], dateLine) {
		_, err := w.Write(b)
		return err
	}
	j := i + bytes.IndexByte(b[i:], '\n') + 1
	v := h.Peek(fasthttp.HeaderDate)
	switch {
	case len(v) == 0:
		b = b[:i+copy(b[i:], b[j:])]
	case len(v) == j-i-len(dateLine)-2:
		copy(b[i+len(dateLine):], v)
	default:
		rest := b[j:]
		if inW {
			rest = append(a.head[:0], rest...)
			a.head = rest
		}
		if _, err := w.Write(b[:i]); err != nil {
			return err
		}
		_, _ = w.Write(dateLine)
		_, _ = w.Write(v)
		_, _ = w.Write(crlf)
		b = rest
	}
	_, err := w.Write(b)
	return err
}

// noBodyStatus: 1xx, 204 and 304 answers have no body (RFC 9110 6.4.1).
func noBodyStatus(code int) bool {
	return code >= 100 && code < 200 || code == fasthttp.StatusNoContent || code == fasthttp.StatusNotModified
}

func hasTrailers(h *fasthttp.ResponseHeader) bool {
	for range h.Trailers() {
		return true
	}
	return false
}

// writeChunk writes p as one chunk.
func writeChunk(w *bufio.Writer, p []byte) error {
	var n [16]byte
	_, _ = w.Write(strconv.AppendUint(n[:0], uint64(len(p)), 16))
	_, _ = w.Write(crlf)
	_, _ = w.Write(p)
	_, err := w.Write(crlf)
	return err
}

// chunkWriter writes each Write as a chunk and flushes it: a streamed
// answer reaches the client as the endpoint sends it (server-sent events).
type chunkWriter struct{ w *bufio.Writer }

func (c *chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil // an empty chunk would end the body
	}
	if err := writeChunk(c.w, p); err != nil {
		return 0, err
	}
	if err := c.w.Flush(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// fixedWriter writes at most left bytes; over: the body had more.
type fixedWriter struct {
	w    *bufio.Writer
	left int64
	over bool
}

func (f *fixedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > f.left {
		f.over = true
		p = p[:f.left]
	}
	n, err := f.w.Write(p)
	f.left -= int64(n)
	if err == nil && f.over {
		err = errBodyTooLong
	}
	return n, err
}
