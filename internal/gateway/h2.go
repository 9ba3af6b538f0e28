package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2/hpack"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

// The HTTP/2 data path (h2c, and h2 over TLS): net/http's server serves the
// stream, and the gateway routes it with the same table, balancer, retries
// and records as the HTTP/1.1 path. To an HTTP/2 cluster (gRPC) the stream
// goes over net/http's HTTP/2 transport both ways at once (bidirectional
// streaming), with trailers; to an HTTP/1.1 cluster it goes through the
// HTTP/1.1 path's client, its answer streamed back.

// h2Handler serves an HTTP/2 request whose head is already in ctx.Request:
// decoded straight into it by h2Server, or copied from hr under net/http's
// server (stdH2Handler). hr carries the body, its length and the
// connection (context, TLS); its Header and URL are not read.
type h2Handler func(w http.ResponseWriter, hr *http.Request, ctx *fasthttp.RequestCtx)

// serveH2 serves one HTTP/2 request of the plaintext listener (h2c).
func (g *Gateway) serveH2(w http.ResponseWriter, hr *http.Request, ctx *fasthttp.RequestCtx) {
	g.serveH2On(w, hr, ctx, g.table.Load())
}

// stdH2Handler adapts h to net/http's server: the request's head is
// copied into a pooled context.
func stdH2Handler(h h2Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, hr *http.Request) {
		// A stream's goroutine is new for each request: the context is
		// pooled (it would be 1.7 KB on the heap per call).
		ctx := h2Ctxs.Get().(*fasthttp.RequestCtx)
		defer releaseH2Ctx(ctx)
		req := &ctx.Request
		req.Header.SetMethod(hr.Method)
		req.Header.SetRequestURI(hr.URL.RequestURI())
		req.Header.SetHost(hr.Host)
		for k, vs := range hr.Header {
			if k == "Te" {
				continue // only "trailers" (net/http's check); serveH2On reads it from hr, as h2Server keeps it apart
			}
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		h(w, hr, ctx)
	}
}

// serveH2On serves an HTTP/2 request (h2c, or over TLS when hr.TLS is set)
// with routing table t; ctx.Request holds its head (h2Handler).
func (g *Gateway) serveH2On(w http.ResponseWriter, hr *http.Request, ctx *fasthttp.RequestCtx, t *table) {
	// h2Server made the connection's stand-in once; net/http's server
	// gives its addresses. RBAC's destination_port and destination_ip read
	// the local one.
	fc, _ := hr.Context().Value(h2sConnKey{}).(net.Conn)
	if fc == nil {
		var addr *net.TCPAddr
		if ap, err := netip.ParseAddrPort(hr.RemoteAddr); err == nil {
			addr = net.TCPAddrFromAddrPort(ap)
		}
		local, _ := hr.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if local == nil {
			local = zeroAddr
		}
		fc = h2StandIn(addr, local, hr.TLS)
	}
	ctx.Init2(fc, discardLogger{}, true)
	start := ctx.Time() // Init2's clock read: one less a call
	grpc := isGRPC(ctx.Request.Header.ContentType())
	// h2Server saw which of the fields the gateway edits the request has
	// (a hop-by-hop one, X-Forwarded-For, ...), and kept a gRPC call's te:
	// trailers apart (h2sStream.te). te: trailers goes on to an HTTP/2
	// endpoint (as Envoy sends it; a gRPC server may ask for it), not to
	// an HTTP/1.1 one.
	st, frame := w.(*h2sStream)
	head, te := headUnknown, false // net/http's server: no record of the fields
	if frame && st.ctx == ctx {
		te, head = st.te, st.fields
	} else {
		te = hr.Header.Get("Te") == "trailers" // net/http's server (stdH2Handler)
	}
	r, c, md, mdKey, dest := g.routeCall(ctx, t, start, head)
	if c == nil {
		writeFast(w, &ctx.Response, grpc)
		if t != nil && len(t.logs) > 0 {
			g.logAccess(ctx, t.logs, &call{h2: true, grpc: -1}, "", start, time.Since(start), -1)
		}
		return
	}
	k := call{c: c, retry: &r.spec.retry, md: md, grpc: -1, idle: streamIdle(t, r), detail: rbacShadow(ctx),
		filters: r.spec.filters, dest: dest, logs: t.logs, h2: true, te: te, start: start}
	if len(k.logs) > 0 {
		k.actx = ctx
	}
	if len(r.spec.hash) > 0 {
		var setCookie string
		if k.hash, k.hashed, setCookie = callHash(ctx, r.spec.hash); setCookie != "" {
			w.Header().Add("Set-Cookie", setCookie) // sent with the answer's headers
		}
	}
	if g.rec != nil {
		k.src = sourceOf(ctx) // before prepareRequest rewrites the request
	}
	g.startTrace(ctx, t.tracing, &k.tr, c.spec.h2c) // an HTTP/1.1 cluster's tries write their own
	k.noteURI(ctx, r)
	g.prepareRequest(ctx, r, head, &k.rid, nil)
	k.tr.noteRequestID(&k.rid, &ctx.Request.Header)
	if r.spec.timeout > 0 {
		k.deadline = start.Add(r.spec.timeout)
	}
	if grpc {
		if v := ctx.Request.Header.Peek("Grpc-Timeout"); len(v) > 0 {
			d, err := parseGRPCTimeout(v)
			if err != nil {
				g.localReply(ctx, fasthttp.StatusBadRequest, c.name, reasonBadRequest, err.Error())
				k.status, k.reason = fasthttp.StatusBadRequest, reasonBadRequest
				writeFast(w, &ctx.Response, grpc)
				g.finishH2(&k, r, mdKey, start, 0)
				return
			}
			if dl := start.Add(d); k.deadline.IsZero() || dl.Before(k.deadline) {
				k.deadline = dl
			}
		}
	}
	if c.spec.h2c {
		g.proxyH2(w, hr, ctx, &k, r, mdKey, start, grpc)
		return
	}
	g.proxyH2ToH1(w, hr, ctx, &k, r, mdKey, start, grpc)
}

// h2Ctxs are the request contexts of HTTP/2 streams.
var h2Ctxs = sync.Pool{New: func() any { return new(fasthttp.RequestCtx) }}

// releaseH2Ctx returns a stream's context to h2Ctxs once its handler is
// done with it (the access log and call record read it before). Its
// connection is replaced by the next stream's Init2, not cleared here
// (Init2 reads the clock: 0.9% of a gRPC call's user CPU).
func releaseH2Ctx(ctx *fasthttp.RequestCtx) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.ResetUserValues()
	h2Ctxs.Put(ctx)
}

// proxyH2 sends an HTTP/2 request to an HTTP/2 cluster: request and answer
// stream at once, trailers pass, and attempts whose answer's headers (a
// trailers-only answer) or failure the route retries on are retried while
// the request body is within the route's buffer limit (replayBody).
func (g *Gateway) proxyH2(w http.ResponseWriter, hr *http.Request, ctx *fasthttp.RequestCtx, k *call, r *routeRT, mdKey string, start time.Time, grpc bool) {
	c := k.c
	var body *replayBody
	if hr.Body != nil && hr.Body != http.NoBody && hr.ContentLength != 0 {
		if st, ok := w.(*h2sStream); ok {
			body = &st.replay // one allocation less a call
		} else {
			body = new(replayBody)
		}
		body.src, body.limit, body.max = hr.Body, r.spec.bufferLimit, int64(g.opts.MaxRequestBytes)
	}
	if max := g.opts.MaxRequestBytes; max > 0 && hr.ContentLength > int64(max) {
		k.reason, k.err = reasonTooLargeIn, errRequestTooLarge
		g.replyH2(w, ctx, k, grpc, r, mdKey, start)
		return
	}
	var res *h2Answer
	c.active.Add(1)
	c.noteCall()
	for {
		pick, lv, ep := k.pick()
		if ep == nil {
			break
		}
		h2, ok := ep.up.(*h2cUpstream)
		if !ok { // the cluster changed protocol between the pick and now
			k.release()
			pick.Done(0, balancer.Canceled)
			k.reason, k.err = reasonNoHealthy, errors.New("endpoint is not HTTP/2")
			break
		}
		if c.cb != nil && !k.enterCircuit(pick) {
			break // answered by the circuit breakers (circuit.go)
		}
		k.endpoint = ep.addr
		k.tried[k.retries] = pick.Host.ID
		k.levels |= levelBit(lv)
		try := k.deadline
		if pt := k.retry.perTry; pt > 0 {
			if d := k.now().Add(pt); try.IsZero() || d.Before(try) {
				try = d
			}
		}
		var attempt io.ReadCloser
		if body != nil {
			attempt = body.attempt()
		}
		t0 := k.now()
		var err error
		res, err = h2.tr.roundTripFast(nil, try, &ctx.Request.Header, k.te, hr.ContentLength, attempt)
		lat := time.Since(t0)
		if c.cb != nil {
			c.cb.leave()
		}
		k.release()
		status := 0
		if err == nil {
			status = res.Status
		} else if !try.IsZero() && !k.now().Before(try) {
			err = fasthttp.ErrTimeout
		}
		outcome, reason := classify(err, status)
		k.reason, k.err, k.status = reason, err, status
		k.grpc = -1
		if err == nil {
			k.grpc = parseGRPCStatus(fieldValue(res.Fields, "grpc-status"))
			if k.grpc >= 0 && outcome == balancer.Success {
				outcome = grpcOutcome(k.grpc)
			}
		} else if why := body.reason(); why != "" {
			outcome, k.reason, k.err = balancer.Canceled, why, body.failure()
		}
		pick.Done(lat, outcome)
		ep.m.observe(status, lat)
		if !k.retry.retriable(k.reason, k.status, k.grpc, k.err) || !body.replayable() || k.retries >= k.retry.num ||
			(!k.deadline.IsZero() && !k.now().Before(k.deadline)) || !c.allowRetry() {
			break
		}
		if res != nil {
			res.Body.Close()
			res = nil
		}
		k.permit = true
		k.retries++
		c.m.retries.Inc()
	}
	c.active.Add(-1)
	if k.err != nil || res == nil {
		if k.err == nil {
			k.err = errors.New("no answer")
		}
		g.replyH2(w, ctx, k, grpc, r, mdKey, start)
		return
	}
	defer res.Body.Close()
	ct := fieldValue(res.Fields, "content-type")
	st, direct := w.(*h2sStream)
	if direct && st.status == 0 && len(st.hdr) == 0 {
		// The endpoint's fields go on as they came, edited in place: no
		// http.Header built either side.
		fs := append(forwardFields(res.Fields), hpack.HeaderField{Name: "via", Value: viaValue},
			hpack.HeaderField{Name: "x-request-id", Value: st.keep(k.rid.of(&ctx.Request.Header))})
		if k.filters != nil {
			edited := fs // on the heap (fieldHeader), only when filtered
			k.filters.response(ctx, fieldHeader{&edited}, k.dest)
			fs = edited
		}
		st.setH2Head(fs, res.Status)
	} else {
		wh := w.Header()
		for key, vs := range stdHeaderOf(forwardFields(res.Fields)) {
			if key == "Set-Cookie" {
				wh[key] = append(wh[key], vs...) // after a hash cookie the gateway set
				continue
			}
			wh[key] = vs
		}
		wh["Via"] = viaValues
		wh.Set("X-Request-Id", string(k.rid.of(&ctx.Request.Header)))
		k.filters.response(ctx, stdHeader(wh), k.dest)
		w.WriteHeader(res.Status)
	}
	trailersOnly := k.grpc >= 0
	// An answer all in already (a unary call's, most often) goes out as
	// one write at the handler's end: headers, body and trailers.
	whole := res.ended()
	if !trailersOnly && !whole && (grpc || isEventStream(ct)) {
		flush(w) // a stream's headers go at once: the client may wait on them
	}
	n, rerr, werr := copyFlushing(w, res.Body, !whole)
	if rerr == nil {
		if v := fieldValue(res.Trailers, "grpc-status"); v != "" {
			k.grpc = parseGRPCStatus(v)
		}
		if direct {
			st.trailers = res.Trailers // sent as they came
		} else {
			wh := w.Header()
			for _, f := range res.Trailers {
				key := http.TrailerPrefix + canonicalHeader(f.Name)
				wh[key] = append(wh[key], f.Value)
			}
		}
	} else if werr == nil {
		// The answer broke mid-body (reset, or the deadline passed).
		k.reason = reasonReset
		if errors.Is(rerr, context.DeadlineExceeded) {
			k.reason = reasonTimeout
		}
		if !grpc {
			g.finishH2(k, r, mdKey, start, n)
			panic(http.ErrAbortHandler) // resets the client's stream, as Envoy does
		}
		code := grpcUnavailable
		if k.reason == reasonTimeout {
			code = grpcDeadlineExceeded
		}
		k.grpc = code
		wh := w.Header()
		wh[http.TrailerPrefix+"Grpc-Status"] = []string{strconv.Itoa(code)}
		wh[http.TrailerPrefix+"Grpc-Message"] = []string{grpcMessageEscape("gateway: upstream " + k.reason + ": " + rerr.Error())}
	}
	if body != nil {
		k.bytesIn = body.read()
	}
	g.finishH2(k, r, mdKey, start, n)
}

// viaValues is the Via header of HTTP/2 answers, shared: a filter adding
// to it appends to a slice of capacity 1, which copies.
var viaValues = []string{viaValue}

// proxyH2ToH1 sends an HTTP/2 request to an HTTP/1.1 cluster through the
// HTTP/1.1 path's client (readyBody, forward) and streams the answer back.
func (g *Gateway) proxyH2ToH1(w http.ResponseWriter, hr *http.Request, ctx *fasthttp.RequestCtx, k *call, r *routeRT, mdKey string, start time.Time, grpc bool) {
	if hr.Body != nil && hr.Body != http.NoBody && hr.ContentLength != 0 {
		if !g.readyBody(ctx, r, k, hr.Body, int(max(hr.ContentLength, -1)), nil) {
			writeFast(w, &ctx.Response, grpc)
			g.finishH2(k, r, mdKey, start, 0)
			return
		}
	}
	resp := &ctx.Response
	k.forward(&ctx.Request, resp)
	g.answer(ctx, k)
	if k.err != nil {
		writeFast(w, resp, grpc)
		g.finishH2(k, r, mdKey, start, 0)
		return
	}
	var n int64
	if resp.IsBodyStream() {
		// Counted and recorded here: the tail is not armed.
		writeHead(w, resp, resp.Header.ContentLength())
		var rerr error
		n, rerr, _ = copyFlushing(w, resp.BodyStream(), true)
		if rerr != nil {
			k.reason = reasonReset
		} else {
			eachTrailer(&resp.Header, func(key, v []byte) {
				w.Header()[http.TrailerPrefix+string(key)] = []string{string(v)}
				if bytes.EqualFold(key, []byte("grpc-status")) {
					k.grpc = parseGRPCStatus(string(v))
				}
			})
		}
		if c, ok := resp.BodyStream().(fasthttp.ReadCloserWithError); ok {
			_ = c.CloseWithError(rerr)
		}
	} else {
		writeHead(w, resp, len(resp.Body()))
		m, _ := w.Write(resp.Body())
		n = int64(m)
	}
	g.finishH2(k, r, mdKey, start, n)
}

// replyH2 answers a call that got no answer: a JSON error, or, for gRPC,
// a trailers-only answer with the status.
func (g *Gateway) replyH2(w http.ResponseWriter, ctx *fasthttp.RequestCtx, k *call, grpc bool, r *routeRT, mdKey string, start time.Time) {
	code, msg := replyFor(k.reason, k.c.name, k.err)
	g.localReply(ctx, code, k.c.name, k.reason, msg)
	ctx.Response.Header.SetCanonical(nameRequestID, k.rid.of(&ctx.Request.Header))
	k.status = code
	if grpc {
		k.grpc = grpcStatusFor(code, k.reason)
	}
	writeFast(w, &ctx.Response, grpc)
	g.finishH2(k, r, mdKey, start, int64(len(ctx.Response.Body())))
}

// finishH2 counts and records an HTTP/2 call.
func (g *Gateway) finishH2(k *call, r *routeRT, mdKey string, start time.Time, out int64) {
	lat := time.Since(start)
	k.c.m.observe(k.status, lat)
	k.endTrace(lat)
	if g.rec != nil {
		g.recordCall(k, r, mdKey, start, lat, out)
	}
	if k.actx != nil {
		g.logAccess(k.actx, k.logs, k, r.name, start, lat, out)
	}
}

// writeFast writes an answer the fasthttp path built (a local reply, a
// redirect, a direct response) to an HTTP/2 client. A gRPC client gets a
// reply of the gateway's own as a trailers-only answer: HTTP 200 with the
// grpc-status and grpc-message the HTTP status maps to.
func writeFast(w http.ResponseWriter, resp *fasthttp.Response, grpc bool) {
	if grpc && len(resp.Header.Peek(ErrorHeader)) > 0 {
		h := w.Header()
		h.Set("Content-Type", "application/grpc")
		h.Set(ErrorHeader, string(resp.Header.Peek(ErrorHeader)))
		h.Set("Via", viaValue)
		if id := resp.Header.Peek("X-Request-Id"); len(id) > 0 {
			h.Set("X-Request-Id", string(id))
		}
		h.Set("Grpc-Status", strconv.Itoa(grpcStatusFor(resp.StatusCode(), string(resp.Header.Peek(ErrorHeader)))))
		h.Set("Grpc-Message", grpcMessageEscape(string(resp.Body())))
		w.WriteHeader(http.StatusOK)
		return
	}
	writeHead(w, resp, len(resp.Body()))
	_, _ = w.Write(resp.Body())
}

// writeHead writes a fasthttp answer's status and headers, with its body's
// length (-1: unknown).
func writeHead(w http.ResponseWriter, resp *fasthttp.Response, cl int) {
	if st, ok := w.(*h2sStream); ok && st.status == 0 {
		st.setFastHead(&resp.Header, resp.StatusCode(), cl) // the same fields, with no http.Header built
		return
	}
	h := w.Header()
	for k, v := range resp.Header.All() {
		switch string(k) {
		case "Content-Length", "Connection", "Transfer-Encoding", "Trailer":
			continue
		}
		h.Add(string(k), string(v))
	}
	if ct := resp.Header.ContentType(); len(ct) > 0 {
		h.Set("Content-Type", string(ct))
	}
	if cl >= 0 {
		h.Set("Content-Length", strconv.Itoa(cl))
	}
	w.WriteHeader(resp.StatusCode())
}

// forwardFields drops from an HTTP/2 answer's fields, in place, the
// hop-by-hop ones (RFC 9110 7.6.1, and those Connection names) and Via and
// X-Request-Id, which the gateway sets.
func forwardFields(fs []hpack.HeaderField) []hpack.HeaderField {
	var conn []string // the names Connection lists (a malformed HTTP/2 answer's)
	for _, f := range fs {
		if f.Name == "connection" {
			conn = append(conn, f.Value)
		}
	}
	return slices.DeleteFunc(fs, func(f hpack.HeaderField) bool {
		switch f.Name {
		case "proxy-authenticate", "proxy-authorization", "te", "trailer", "via", "x-request-id":
			return true
		}
		if connectionSpecific(f.Name) {
			return true
		}
		for _, v := range conn {
			for tok := range strings.SplitSeq(v, ",") {
				if strings.EqualFold(strings.TrimSpace(tok), f.Name) {
					return true
				}
			}
		}
		return false
	})
}

func isEventStream(ct string) bool {
	return len(ct) >= 17 && (ct[:17] == "text/event-stream")
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyFlushing copies src to w, flushing after each write if each so
// that a stream's messages (gRPC, server-sent events) go out as they come.
// It returns the bytes copied, the error that ended the read (nil at EOF)
// and the error of a write (the client went away).
func copyFlushing(w http.ResponseWriter, src io.Reader, each bool) (n int64, rerr, werr error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		m, err := src.Read(buf)
		if m > 0 {
			if _, werr = w.Write(buf[:m]); werr != nil {
				return n, nil, werr
			}
			n += int64(m)
			if !each {
				continue
			}
			if werr = flushError(w); werr != nil {
				return n, nil, werr
			}
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}

func flush(w http.ResponseWriter) { _ = flushError(w) }

// flushError flushes w: directly when it can (both HTTP/2 servers' writers
// can), else through a ResponseController (an allocation per call).
func flushError(w http.ResponseWriter) error {
	if f, ok := w.(interface{ FlushError() error }); ok {
		return f.FlushError()
	}
	return http.NewResponseController(w).Flush()
}

// replayBody is an HTTP/2 request body read while it is sent (a stream may
// be bidirectional: the client may wait for answers before it sends more)
// and kept, up to the route's buffer limit, so that a retry can send it
// again from its start. Past the limit it is dropped and the call is not
// retried (Envoy's semantics). Each attempt reads through its own reader;
// a reader of an attempt given up on stops reading, and what it read is
// kept for the next attempt. The transports' goroutines read it.
type replayBody struct {
	src   io.Reader
	limit int64
	max   int64 // the gateway's request size limit; 0: none

	srcMu sync.Mutex // one read of src at a time

	mu   sync.Mutex // guards the fields below
	buf  []byte     // src[0:len(buf)] while not over
	over bool       // past the limit: no replay
	n    int64      // bytes read from src
	eof  bool
	err  error // src's, or errRequestTooLarge
	gen  int   // the current attempt

	first replayReader // the first attempt's
}

var errStaleAttempt = errors.New("gateway: attempt given up")

// attempt starts the next attempt's reader.
func (b *replayBody) attempt() io.ReadCloser {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gen++
	if b.gen == 1 {
		b.first = replayReader{b: b, gen: 1}
		return &b.first
	}
	return &replayReader{b: b, gen: b.gen}
}

// replayable reports whether another attempt may send the body again.
func (b *replayBody) replayable() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.over && b.err == nil
}

// reason is how the client's body ended the call ("" if it did not).
func (b *replayBody) reason() string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.err == nil:
		return ""
	case errors.Is(b.err, errRequestTooLarge):
		return reasonTooLargeIn
	}
	return reasonBadRequest
}

func (b *replayBody) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *replayBody) read() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

type replayReader struct {
	b   *replayBody
	gen int
	pos int64
}

// fromBuf serves a read from what was kept, if it can; b.mu is held.
func (r *replayReader) fromBuf(p []byte) (int, error, bool) {
	b := r.b
	switch {
	case r.gen != b.gen:
		return 0, errStaleAttempt, true
	case r.pos < int64(len(b.buf)):
		n := copy(p, b.buf[r.pos:])
		r.pos += int64(n)
		return n, nil, true
	case r.pos < b.n:
		// Read by an attempt before this one and dropped (past the
		// limit): this attempt cannot send the whole body.
		return 0, errors.New("gateway: request body past the retry buffer limit"), true
	case b.eof:
		return 0, io.EOF, true
	case b.err != nil:
		return 0, b.err, true
	}
	return 0, nil, false
}

func (r *replayReader) Read(p []byte) (int, error) {
	b := r.b
	b.mu.Lock()
	n, err, ok := r.fromBuf(p)
	b.mu.Unlock()
	if ok {
		return n, err
	}
	b.srcMu.Lock()
	defer b.srcMu.Unlock()
	b.mu.Lock()
	if n, err, ok := r.fromBuf(p); ok { // another attempt read meanwhile
		b.mu.Unlock()
		return n, err
	}
	b.mu.Unlock()
	n, err = b.src.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += int64(n)
	if b.max > 0 && b.n > b.max {
		err = errRequestTooLarge
	}
	stale := r.gen != b.gen
	if !b.over {
		if int64(len(b.buf))+int64(n) > b.limit && !stale {
			b.over, b.buf = true, nil
		} else {
			// A stale reader's bytes are kept even past the limit: the
			// current attempt needs them.
			b.buf = append(b.buf, p[:n]...)
			b.over = int64(len(b.buf)) > b.limit
		}
	}
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.err = err
	}
	if stale {
		return 0, errStaleAttempt
	}
	r.pos += int64(n)
	return n, err
}

// whole is the body when all of it is in: read before (by an earlier
// attempt), or waiting whole in the client's stream (wholeSource), which
// it then reads into the buffer kept for the next attempt; within the
// buffer and request limits only. r stays at the start.
func (r *replayReader) whole() ([]byte, bool) {
	b := r.b
	b.srcMu.Lock()
	defer b.srcMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.gen != b.gen || r.pos != 0 || b.over || b.err != nil {
		return nil, false
	}
	if b.eof {
		return b.buf, true
	}
	src, ok := b.src.(wholeSource)
	if !ok || b.n != 0 {
		return nil, false
	}
	limit := b.limit
	if b.max > 0 {
		limit = min(limit, b.max)
	}
	buf, ok := src.takeWhole(b.buf, int(min(limit, math.MaxInt32)))
	if !ok {
		return nil, false
	}
	b.buf, b.n, b.eof = buf, int64(len(buf)), true
	return b.buf, true
}

// wholeSource is a client's request body that may have come whole.
type wholeSource interface {
	// takeWhole appends the whole body to dst and reads it, if all of it
	// came and it is at most max bytes; otherwise it reads nothing.
	takeWhole(dst []byte, max int) ([]byte, bool)
}

// Close is the transport's: the client's body stays open for the next
// attempt (net/http's server closes it).
func (r *replayReader) Close() error { return nil }
