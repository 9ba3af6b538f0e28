package gateway

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// h2Preface starts every HTTP/2 connection with prior knowledge (h2c).
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// Serve serves the proxy on ln until Shutdown: HTTP/1.1 through fasthttp,
// and h2c (prior knowledge) through net/http, told apart by the first bytes
// of each connection. It returns nil after Shutdown.
func (g *Gateway) Serve(ln net.Listener) error {
	return g.servePlain(ln, g.serveH1, g.serveH2, func(s servers) { g.srv, g.h2, g.ln = s.fast, s.h2, s.ln })
}

// servePlain serves HTTP/1.1 (fast) and h2c (h2) on ln, told apart by the
// first bytes of each connection, until Shutdown; keep hands the servers
// to Shutdown (under srvMu).
func (g *Gateway) servePlain(ln net.Listener, fast h1Handler, h2h h2Handler, keep func(servers)) error {
	fastLn := newConnListener(ln.Addr())
	h2Ln := newConnListener(ln.Addr())
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := g.newFastServer(fast)
	h2 := g.newH2Server(h2h, &p)
	g.srvMu.Lock()
	keep(servers{fast: srv, h2: h2, ln: ln})
	g.srvMu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(fastLn) }()
	go func() { defer wg.Done(); _ = h2.Serve(h2Ln) }()
	var sniffers sync.WaitGroup
	err := acceptLoop(ln, func(c net.Conn) {
		sniffers.Add(1)
		go func() {
			defer sniffers.Done()
			g.dispatch(c, fastLn, h2Ln)
		}()
	})
	sniffers.Wait()
	fastLn.Close()
	h2Ln.Close()
	wg.Wait()
	return err
}

// newFastServer returns the HTTP/1.1 server of a listener (h1server.go).
func (g *Gateway) newFastServer(h h1Handler) *h1Server {
	return newH1Server(h, g.requestError, "sextant", g.opts.RequestReadTimeout, 5*time.Minute)
}

// newH2Server returns the HTTP/2 server of a listener: the frame-level
// h2Server (h2server.go), or net/http's when SEXTANT_H2_SERVER=nethttp.
func (g *Gateway) newH2Server(h h2Handler, p *http.Protocols) h2Serving {
	if !useNetHTTPH2() {
		return newFastH2Server(h, 5*time.Minute)
	}
	return &http.Server{Handler: stdH2Handler(h), Protocols: p, HTTP2: h2Config(),
		ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute, ErrorLog: nil}
}

// h2Config is the HTTP/2 settings of the gateway's server and transport.
// Headers are sent without HPACK's dynamic table: every call carries a
// unique x-request-id (and traceparent), which the table would index and
// evict on every call (10% of the gateway's CPU per gRPC call, profiled);
// what is lost is the compression of repeated headers, on links that are
// mostly loopback or in-cluster.
func h2Config() *http.HTTP2Config {
	return &http.HTTP2Config{MaxEncoderHeaderTableSize: 1} // 0 would be the default (4 KiB)
}

// servers are one listener's: Shutdown stops them.
type servers struct {
	fast *h1Server
	h2   h2Serving
	ln   net.Listener
}

// dispatch reads the first bytes of c and hands it to the HTTP/1.1 or the
// h2c server, replaying what it read.
func (g *Gateway) dispatch(c net.Conn, fastLn, h2Ln *connListener) {
	var buf [24]byte
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if !bytes.Equal(buf[:n], h2Preface[:n]) || err != nil {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	if n == 0 {
		c.Close()
		return
	}
	// Raw reads and writes (nbconn.go), for HTTP/1.1 and h2c alike.
	pc := &prefixConn{Conn: newNBConn(c), prefix: append([]byte(nil), buf[:n]...)}
	if n == len(buf) && bytes.Equal(buf[:], h2Preface) {
		bc := newBatchConn(pc)
		bc.start()
		h2Ln.push(bc)
	} else {
		fastLn.push(&lfConn{Conn: pc})
	}
}

// Shutdown closes the listener given to Serve, lets calls in flight finish
// (until ctx ends; idle connections are closed at once, busy ones after
// their answer), closes upgraded connections (WebSocket tunnels) and idle
// upstream connections.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.srvMu.Lock()
	all := append([]servers{{fast: g.srv, h2: g.h2, ln: g.ln}}, g.tlsServers...)
	g.srvMu.Unlock()
	var err error
	for _, s := range all {
		if s.ln != nil {
			s.ln.Close()
		}
	}
	// Upgraded connections last as long as their two ends want, and the
	// server would wait for them: they are closed first.
	g.tunnels.closeAll()
	g.stopHealthChecks()
	g.stopDNS()
	g.jwks.close()
	for _, s := range all {
		if s.fast != nil {
			if e := s.fast.Shutdown(ctx); e != nil && err == nil {
				err = e
			}
		}
		if s.h2 != nil {
			if e := s.h2.Shutdown(ctx); e != nil && err == nil {
				err = e
			}
		}
	}
	g.waitMirrors(ctx)
	g.pools.closeAll()
	return err
}

// connListener is a net.Listener fed by dispatch.
type connListener struct {
	addr   net.Addr
	ch     chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.closed:
		c.Close()
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// prefixConn replays the bytes dispatch read before reading the conn.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// requestError answers a request fasthttp could not read, in the gateway's
// error shape (fasthttp's default says 400 even for a body over the limit).
func (g *Gateway) requestError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		g.localReply(ctx, fasthttp.StatusRequestEntityTooLarge, "", "request_too_large",
			"request body larger than "+strconv.Itoa(g.opts.MaxRequestBytes)+" bytes")
	case errors.Is(err, errBareLF):
		g.localReply(ctx, fasthttp.StatusBadRequest, "", "bad_request", errBareLF.Error()[len("gateway: "):])
	case errors.As(err, &small):
		g.localReply(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "", "bad_request", "request headers too large")
	case errors.As(err, &ne) && ne.Timeout():
		g.localReply(ctx, fasthttp.StatusRequestTimeout, "", "bad_request", "request not received in time")
	default:
		g.localReply(ctx, fasthttp.StatusBadRequest, "", "bad_request", "cannot parse the request: "+err.Error())
	}
}
