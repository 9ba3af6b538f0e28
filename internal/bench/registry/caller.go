package registry

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// caller is a minimal HTTP/1.1 client on one keep-alive connection, for
// one loader goroutine. The loader shares the cores with the server, and
// net/http's client spends three goroutines and several channel handoffs per
// request; this writes each request with one syscall and reads the answer
// on the caller's goroutine, into a buffer it reuses. It speaks only what
// the loopback benchmark needs: Content-Length or chunked answers, TLS
// when asked, no redirects, no compression.
type caller struct {
	addr string      // host:port to dial
	host string      // Host header
	auth string      // Authorization header line, or ""
	hdr  string      // more header lines ("Name: value\r\n"), or ""
	tls  *tls.Config // TLS to dial with, or nil
	conn net.Conn
	br   *bufio.Reader
	wbuf []byte
	buf  []byte // body of the last answer
}

// close drops the connection; the caller may be used again (it redials).
func (c *caller) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// requestTimeout bounds one request; ctx is checked between requests, so an
// interrupted run ends within this (blocking queries use wait=10s).
const requestTimeout = 60 * time.Second

// send does one request to path (which includes the query) and reads the
// whole answer into c.buf. A non-200 answer is an error carrying the body.
func (c *caller) send(ctx context.Context, method, path string, body []byte) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if c.conn == nil {
		var conn net.Conn
		var err error
		if c.tls != nil {
			d := tls.Dialer{Config: c.tls}
			conn, err = d.DialContext(ctx, "tcp", c.addr)
		} else {
			var d net.Dialer
			conn, err = d.DialContext(ctx, "tcp", c.addr)
		}
		if err != nil {
			return 0, err
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 64<<10)
	}
	w := append(c.wbuf[:0], method...)
	w = append(w, ' ')
	w = append(w, path...)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, c.host...)
	w = append(w, "\r\nUser-Agent: sextant-bench/1\r\n"...)
	w = append(w, c.auth...)
	w = append(w, c.hdr...)
	if body != nil {
		w = append(w, "Content-Type: application/json\r\nContent-Length: "...)
		w = strconv.AppendInt(w, int64(len(body)), 10)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	w = append(w, body...)
	c.wbuf = w
	_ = c.conn.SetDeadline(time.Now().Add(requestTimeout))
	if _, err := c.conn.Write(w); err != nil {
		c.close()
		return 0, err
	}
	status, err := c.readAnswer()
	if err != nil {
		c.close()
		return status, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if status != http.StatusOK {
		return status, fmt.Errorf("%s %s: status %d: %.200s", method, path, status, c.buf)
	}
	return status, nil
}

var errProtocol = errors.New("malformed HTTP answer")

// readAnswer reads a status line, headers and body into c.buf. It closes
// the connection when the server asks to.
func (c *caller) readAnswer() (int, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, errProtocol
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, errProtocol
	}
	length, chunked, closing := -1, false, false
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return status, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return status, errProtocol
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(v)); err != nil || length < 0 {
				return status, errProtocol
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			closing = bytes.EqualFold(v, []byte("close"))
		}
	}
	c.buf = c.buf[:0]
	switch {
	case chunked:
		err = c.readChunked()
	case length >= 0:
		c.buf = slices.Grow(c.buf, length)[:length]
		_, err = io.ReadFull(c.br, c.buf)
	default: // no length: the body runs to the end of the connection
		closing = true
		var b bytes.Buffer
		_, err = b.ReadFrom(c.br)
		c.buf = append(c.buf, b.Bytes()...)
	}
	if err == nil && closing {
		c.close()
	}
	return status, err
}

func (c *caller) readChunked() error {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions
		}
		n, err := strconv.ParseUint(string(line), 16, 31)
		if err != nil {
			return errProtocol
		}
		if n == 0 {
			for { // trailers, up to the empty line
				line, err := c.br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		old := len(c.buf)
		c.buf = slices.Grow(c.buf, int(n))[:old+int(n)]
		if _, err := io.ReadFull(c.br, c.buf[old:]); err != nil {
			return err
		}
		if _, err := c.br.Discard(2); err != nil { // CRLF after the chunk
			return err
		}
	}
}
