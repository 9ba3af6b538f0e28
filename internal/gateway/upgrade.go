package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// HTTP/1.1 upgrades (WebSocket), as Envoy proxies them: a request that asks
// for an upgrade of a type the listener's upgrade_configs list (and its
// route does not disable) goes to one endpoint over a connection of its
// own; if the endpoint switches protocols (101), the gateway answers with
// its response head and then copies bytes both ways until either side
// closes, interpreting none of them. Anything else the endpoint answers is
// passed back as the answer to the request. An upgrade type the listener
// does not list, or the route disables, is refused with 403, as Envoy does
// ("upgrade_failed"). No retries: an upgrade is not replayable.

const reasonUpgradeFailed = "upgrade_failed"

// upgradeType is the lower-cased protocol a request asks to upgrade to, or
// "" when it asks for none (an Upgrade header without "upgrade" among the
// Connection tokens is no request to upgrade: RFC 9110 7.8).
func upgradeType(h *fasthttp.RequestHeader) string {
	up := h.Peek("Upgrade")
	if len(up) == 0 || !hasToken(h.Peek("Connection"), "upgrade") {
		return ""
	}
	// "websocket" or "websocket, other": the first protocol is the one
	// asked for first; it names the upgrade config.
	if i := bytes.IndexByte(up, ','); i >= 0 {
		up = up[:i]
	}
	return strings.ToLower(string(bytes.TrimSpace(up)))
}

// hasToken reports whether the comma-separated list v holds token, in any
// case.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var item []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
		} else {
			item, v = v, nil
		}
		if bytes.EqualFold(bytes.TrimSpace(item), []byte(token)) {
			return true
		}
	}
	return false
}

// upgradeAllowed applies Envoy's rule: the listener must list the type; the
// route's own setting, if it has one, wins over the listener's default.
func upgradeAllowed(t *table, r *routeRT, typ string) bool {
	def, listed := t.upgrades[typ]
	if !listed {
		return false
	}
	if on, ok := r.spec.upgrades[typ]; ok {
		return on
	}
	return def
}

// serveUpgrade answers a request to upgrade to typ: refused unless the
// listener and route allow it, else proxied (upgrade).
func (g *Gateway) serveUpgrade(ctx *fasthttp.RequestCtx, t *table, r *routeRT, typ string, c *clusterRT, md map[string]string, mdKey string, start time.Time) {
	if !upgradeAllowed(t, r, typ) {
		g.localReply(ctx, fasthttp.StatusForbidden, c.name, reasonUpgradeFailed,
			"upgrade to "+strconv.Quote(typ)+" is not enabled for this route (the listener's or route's upgrade_configs)")
		k := call{c: c, status: fasthttp.StatusForbidden, reason: reasonUpgradeFailed}
		if g.rec != nil {
			k.src = sourceOf(ctx)
		}
		g.finishUpgrade(&k, r, mdKey, start, 0, 0)
		return
	}
	g.upgrade(ctx, c, md, r, mdKey, start)
}

// upgradeIdle bounds how long the upstream may take to answer an upgrade
// request, when the route sets no timeout.
const upgradeIdle = 15 * time.Second

// upgrade proxies an upgrade request to one endpoint of c. It answers the
// request itself, or hijacks the downstream connection for the tunnel.
func (g *Gateway) upgrade(ctx *fasthttp.RequestCtx, c *clusterRT, md map[string]string, r *routeRT, mdKey string, start time.Time) {
	k := call{c: c, retry: &r.spec.retry, md: md}
	if len(r.spec.hash) > 0 {
		// A tunnel keeps its endpoint by the hash; a cookie to generate is
		// not set on a 101.
		k.hash, k.hashed, _ = callHash(ctx, r.spec.hash)
	}
	if g.rec != nil {
		k.src = sourceOf(ctx)
	}
	res, _, ep := k.pick()
	if ep == nil {
		g.answer(ctx, &k)
		g.finishUpgrade(&k, r, mdKey, start, 0, 0)
		return
	}
	k.endpoint = ep.addr
	var up net.Conn
	var err error
	d := c.spec.conn.netDialer(c.spec.connect) // (tcp_keepalive: a tunnel may idle long)
	if c.tls != nil {
		up, err = c.tls.dial(context.Background(), d, ep.addr, false)
	} else {
		up, err = d.Dial("tcp", ep.addr)
	}
	if err != nil {
		outcome, reason := classify(err, 0)
		res.Done(time.Since(start), outcome)
		k.reason, k.err = reason, fmt.Errorf("connect to %s: %w", ep.addr, err)
		g.answer(ctx, &k)
		g.finishUpgrade(&k, r, mdKey, start, 0, 0)
		return
	}
	wait := upgradeIdle
	if r.spec.timeout > 0 {
		wait = r.spec.timeout
	}
	up.SetDeadline(time.Now().Add(wait))
	br := bufio.NewReader(up)
	resp := &ctx.Response
	var head []byte
	err = g.sendUpgrade(ctx, r, up)
	if err == nil {
		head, err = readHead(br)
	}
	if err == nil {
		err = resp.Header.Read(bufio.NewReader(bytes.NewReader(head)))
	}
	if err != nil {
		up.Close()
		outcome, reason := classify(err, 0)
		if reason == "" {
			reason = reasonReset
		}
		res.Done(time.Since(start), outcome)
		k.reason, k.err = reason, fmt.Errorf("upgrade through %s: %w", ep.addr, err)
		resp.Reset()
		g.answer(ctx, &k)
		g.finishUpgrade(&k, r, mdKey, start, 0, 0)
		return
	}
	k.status = resp.StatusCode()
	outcome, _ := classify(nil, k.status)
	res.Done(time.Since(start), outcome)
	if k.status != fasthttp.StatusSwitchingProtocols {
		// Refused: its answer is the request's. Read its body, bounded as
		// any response's, and close: the connection was never pooled.
		err := resp.ReadBody(br, maxResponseBytes)
		up.Close()
		if err != nil {
			k.reason, k.err = reasonReset, fmt.Errorf("upgrade refused by %s, then: %w", ep.addr, err)
			resp.Reset()
		}
		g.answer(ctx, &k)
		g.finishUpgrade(&k, r, mdKey, start, 0, 0)
		return
	}
	// The 101 head goes out as the endpoint wrote it (its Upgrade and
	// Connection headers are the switch itself), then the tunnel. The
	// hijack handler runs once this handler returned (it keeps nothing
	// of ctx; the HTTP/1.1 server runs it even on a broken connection,
	// where the tunnel ends at once): up is pending in tunnels until
	// then, so Shutdown closes it either way, and keeps its deadline.
	if !g.tunnels.pending(up) {
		up.Close() // shutting down
		k.reason, k.err = reasonReset, errors.New("the gateway is shutting down")
		resp.Reset()
		g.answer(ctx, &k)
		g.finishUpgrade(&k, r, mdKey, start, 0, 0)
		return
	}
	tun := func(down net.Conn) {
		if !g.tunnels.attach(up, down) {
			return // shutting down: closeAll closed up
		}
		defer g.tunnels.done(up)
		up.SetDeadline(time.Time{})
		c.active.Add(1)
		c.noteCall()
		defer c.active.Add(-1)
		in, out := tunnel(down, up, br, head)
		g.finishUpgrade(&k, r, mdKey, start, in, out)
	}
	if !hijack(ctx, tun) { // not the HTTP/1.1 server's request: cannot happen
		up.Close()
		k.reason, k.err = reasonReset, errors.New("the connection cannot be handed over")
		resp.Reset()
		g.answer(ctx, &k)
		g.finishUpgrade(&k, r, mdKey, start, 0, 0)
	}
}

// tunnels are the upgraded connections: each upstream connection with its
// downstream one (nil while the hijack is pending), so that Shutdown can
// end them.
type tunnels struct {
	mu     sync.Mutex
	m      map[net.Conn]net.Conn
	closed bool
	wg     sync.WaitGroup // the tunnels copying
}

// pending notes an upstream connection whose tunnel is about to start;
// false once closeAll was called.
func (s *tunnels) pending(up net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = map[net.Conn]net.Conn{}
	}
	s.m[up] = nil
	return true
}

// attach starts the tunnel of up with down; false once closeAll was
// called (which closed up).
func (s *tunnels) attach(up, down net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.m[up] = down
	s.wg.Add(1)
	return true
}

// done forgets a tunnel that ended.
func (s *tunnels) done(up net.Conn) {
	s.mu.Lock()
	delete(s.m, up)
	s.mu.Unlock()
	s.wg.Done()
}

// closeAll closes every tunnel's connections (and pending ones), refuses
// new ones, and waits until their copies have ended.
func (s *tunnels) closeAll() {
	s.mu.Lock()
	s.closed = true
	for up, down := range s.m {
		up.Close()
		if down != nil {
			// The server owns the downstream connection (it closes it
			// once the hijack handler returns, and its Close does
			// nothing before): a deadline ends the copy reading it.
			down.SetDeadline(time.Now())
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// maxHead bounds an upgrade answer's head.
const maxHead = 64 << 10

// readHead reads a response head, through its blank line, as sent.
func readHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) && len(head) < maxHead {
				continue
			}
			return nil, fmt.Errorf("read the answer's head: %w", err)
		}
		if len(head) > maxHead {
			return nil, fmt.Errorf("answer head longer than %d bytes", maxHead)
		}
		if len(line) <= 2 && strings.TrimRight(string(line), "\r\n") == "" {
			return head, nil
		}
	}
}

// sendUpgrade writes the upgrade request to the endpoint: the request as
// the proxy forwards any other (forwarding headers, rewrite), with its
// Connection and Upgrade headers kept.
func (g *Gateway) sendUpgrade(ctx *fasthttp.RequestCtx, r *routeRT, up net.Conn) error {
	h := &ctx.Request.Header
	upgrade := append([]byte(nil), h.Peek("Upgrade")...)
	conn := append([]byte(nil), h.Peek("Connection")...)
	g.prepareRequest(ctx, r, scanRequestHead(&ctx.Request.Header), nil, nil) // hop.go
	h.SetBytesV("Upgrade", upgrade)
	h.SetBytesV("Connection", conn)
	w := bufio.NewWriter(up)
	if err := ctx.Request.Write(w); err != nil {
		return err
	}
	return w.Flush()
}

// tunnel copies bytes both ways, and returns how many went up (in) and
// down (out). When the client ends its side, the endpoint's is
// half-closed, so that it sees the end and may still answer (if the
// client's connection broke instead, the endpoint's is closed); when the
// endpoint's side ends, the tunnel ends (the server closes the client's
// connection once the hijack handler returns: it cannot be half-closed).
func tunnel(down, up net.Conn, upBuf *bufio.Reader, head []byte) (in, out int64) {
	defer up.Close()
	if _, err := down.Write(head); err != nil {
		return 0, 0
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		in, err = io.Copy(up, down)
		if tc, ok := up.(*net.TCPConn); ok && err == nil {
			_ = tc.CloseWrite()
		} else {
			// The client's connection broke (reset, or the deadline
			// of a shutdown): the endpoint's is reset too, as Envoy
			// does, not left half open.
			_ = up.Close()
		}
	}()
	out, _ = io.Copy(down, upBuf) // what the endpoint sent after its head first
	down.SetReadDeadline(time.Now())
	wg.Wait()
	return in, out
}

// finishUpgrade counts and records an upgrade: answered (status), or
// tunnelled until it ended (in and out are the tunnel's bytes).
func (g *Gateway) finishUpgrade(k *call, r *routeRT, mdKey string, start time.Time, in, out int64) {
	lat := time.Since(start)
	k.c.m.observe(k.status, lat)
	k.c.m.upgrades.Inc()
	if g.rec == nil {
		return
	}
	if mdKey == "" {
		mdKey = k.c.spec.subsetName
	}
	g.rec.Record(calllog.Record{
		Start:     start.UnixNano(),
		Latency:   lat,
		Service:   k.c.spec.service,
		Cluster:   k.c.name,
		Route:     r.name,
		Subset:    mdKey,
		Endpoint:  k.endpoint,
		Status:    uint16(k.status),
		Reason:    calllog.ReasonCode(k.reason),
		BytesIn:   uint32(min(in, 1<<32-1)),
		BytesOut:  uint32(min(out, 1<<32-1)),
		Principal: k.src.principal, Subject: k.src.subject, Method: k.src.method, Path: k.src.path, Host: k.src.host,
		Port: k.src.port, PeerIP: k.src.peer, Conn: k.src.conn,
	})
}
