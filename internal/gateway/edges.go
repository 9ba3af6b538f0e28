package gateway

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// The edges of HTTP/1.1 parsing that fasthttp leaves open, answered the
// same on plaintext and TLS ports (issue 50), as nginx answers them:
// bare-LF line endings 400 at once, an HTTP version other than 1.0 and 1.1
// 505, and plain HTTP sent to a TLS port 400.

// errBareLF is what a connection's read fails with once its first request
// was seen to end a line with LF alone: fasthttp waits for CRLFCRLF, so
// such a request would otherwise hang until the read timeout (408 on a
// plaintext port, nothing on a TLS one).
var errBareLF = errors.New("gateway: a line of the request ends in LF without CR (HTTP/1.1 wants CRLF)")

// lfGuard refuses bare LFs in the header block of a connection's first
// request. It stops looking at that block's CRLFCRLF: the body and later
// requests of a kept-alive connection are not framed here (their bounds
// are fasthttp's to know), so a later request with bare LFs still waits
// for the read timeout. Used by the connection's one reading goroutine.
type lfGuard struct {
	done bool   // the first header block ended
	err  error  // errBareLF once seen; every later read fails with it
	last uint32 // the last four bytes read, newest lowest
}

// read reads from r into p: up to (not including) a bare LF, after which
// every read fails with errBareLF.
func (g *lfGuard) read(r io.Reader, p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := r.Read(p)
	if g.done {
		return n, err
	}
	for i, b := range p[:n] {
		if b == '\n' && byte(g.last) != '\r' {
			g.err = errBareLF
			return i, nil
		}
		g.last = g.last<<8 | uint32(b)
		if g.last == 0x0d0a0d0a {
			g.done = true
			break
		}
	}
	return n, err
}

// lfConn is a plaintext connection read through an lfGuard.
type lfConn struct {
	net.Conn
	lf    lfGuard
	addrs connAddrs // rbac.go
}

func (c *lfConn) Read(p []byte) (int, error) { return c.lf.read(c.Conn, p) }

// Close closes c, first reading on after a refused request (lingerClose).
func (c *lfConn) Close() error {
	if c.lf.err != nil {
		lingerClose(c.Conn)
	}
	return c.Conn.Close()
}

// Read reads the TLS connection through its lfGuard.
func (c *tlsServerConn) Read(p []byte) (int, error) { return c.lf.read(c.Conn, p) }

// Close closes c, first reading on after a refused request (lingerClose).
func (c *tlsServerConn) Close() error {
	if c.lf.err != nil {
		lingerClose(c.Conn)
	}
	return c.Conn.Close()
}

// lingerClose closes c's sending side and reads, for a while, what the
// client still sends: closing with unread bytes would reset the connection
// and could take the answer just written with it (nginx's lingering
// close).
func lingerClose(c net.Conn) {
	if pc, ok := c.(*prefixConn); ok {
		c = pc.Conn // what it replays was read already
	}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return
	}
	_ = cw.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.CopyN(io.Discard, c, 64<<10)
}

// versionSupported reports whether a request's protocol is one the
// gateway serves over HTTP/1.x; others are answered 505 on every port.
func versionSupported(ctx *fasthttp.RequestCtx) bool {
	p := ctx.Request.Header.Protocol()
	return string(p) == "HTTP/1.1" || string(p) == "HTTP/1.0"
}

// refuseVersion answers a request of an HTTP version the gateway does not
// serve: 505, as nginx does (fasthttp would serve HTTP/9.9 as 1.0 and the
// upstream see it).
func (g *Gateway) refuseVersion(ctx *fasthttp.RequestCtx) {
	g.localReply(ctx, fasthttp.StatusHTTPVersionNotSupported, "", "bad_request",
		"HTTP version "+strconv.Quote(string(ctx.Request.Header.Protocol()))+" not supported (HTTP/1.0, HTTP/1.1, h2 and h2c are)")
	ctx.SetConnectionClose()
}

// plainOnTLS answers c, whose handshake failed with err, 400 "HTTP
// request to an HTTPS port" when err says its first bytes were an HTTP
// request rather than a TLS record (as nginx and net/http do, instead of
// closing in silence), and reports whether it did. It leaves c to close.
func plainOnTLS(c net.Conn, err error) bool {
	var re tls.RecordHeaderError
	if !errors.As(err, &re) || !looksLikeHTTP(re.RecordHeader) {
		return false
	}
	body := `{"error":{"code":"invalid_argument","message":"gateway: HTTP request to an HTTPS port: use https://","reason":"bad_request","cluster":""}}` + "\n"
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"+ErrorHeader+": bad_request\r\nVia: "+viaValue+
		"\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\nConnection: close\r\n\r\n"+body)
	lingerClose(c)
	return true
}

// looksLikeHTTP reports whether the first five bytes of a connection are
// the start of an HTTP/1.x request line (a method in capitals, maybe
// followed by a space) rather than a TLS record header (0x16 first).
func looksLikeHTTP(h [5]byte) bool {
	for i, b := range h {
		switch {
		case b >= 'A' && b <= 'Z':
		case b == ' ' && i > 0:
			return true
		default:
			return false
		}
	}
	return true
}
