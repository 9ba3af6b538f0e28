package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// Streaming bodies (docs/gateway.md "Streaming and the retry buffer"):
// request and response bodies pass through in bounded memory. A request
// body up to the route's buffer limit (Envoy's per_request_buffer_limit_bytes,
// default defaultBufferLimit) is read whole before it is sent, so that a
// retry can send it again; a longer one (or a chunked one that outgrows the
// limit) is streamed to one endpoint and never retried. An answer of known
// length up to bufferedResponseMax is read whole (the connection goes back
// to the pool at once and a reset mid-body is retriable); any other answer
// streams to the client as it arrives, flushed chunk by chunk (server-sent
// events), with its trailers, and its call record is written when it ends.

const (
	// defaultBufferLimit is Envoy's default per-connection buffer limit,
	// which also bounds what Envoy buffers of a request for retries.
	defaultBufferLimit = 1 << 20
	// bufferedResponseMax: answers of known length up to this are read
	// whole; longer ones stream.
	bufferedResponseMax = 64 << 10
)

// Reasons of a call the client's own request body ended.
const (
	reasonBadRequest = "bad_request"
	reasonTooLargeIn = "request_too_large"
)

var errRequestTooLarge = errors.New("request body larger than the limit")

// bodyBufs pools the buffers answers of known length are read into.
var bodyBufs = sync.Pool{New: func() any { return new([]byte) }}

// reqBody is a downstream request body streamed upstream. It counts the
// bytes, enforces the gateway's request size limit, keeps the client
// connection's read deadline moving (a streamed body may take longer than
// the request read timeout, as long as it keeps coming) and keeps the
// error that ended it, so that a body the client broke is answered as the
// client's fault (400, 413), not the endpoint's. The goroutine sending the
// request (fasthttp's client, on the connection's goroutine) reads it.
type reqBody struct {
	r        io.Reader
	conn     net.Conn // the client's, for read deadlines; nil: none
	idle     time.Duration
	deadline time.Time // the call's; zero: none
	max      int64     // 0: no limit
	n        int64
	err      error
}

func (b *reqBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.conn != nil && b.idle > 0 {
		d := time.Now().Add(b.idle)
		if !b.deadline.IsZero() && b.deadline.Before(d) {
			d = b.deadline
		}
		_ = b.conn.SetReadDeadline(d)
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.max > 0 && b.n > b.max {
		b.err = errRequestTooLarge
		return n, b.err
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// WriteTo copies the body to w in 64 KiB reads (fasthttp's own copy
// reads 4 KiB at a time: a system call each way per 4 KiB).
func (b *reqBody) WriteTo(w io.Writer) (int64, error) { return copyLarge(w, b) }

// SupportsBodyWriteTo lets fasthttp use WriteTo (fasthttp.BodyWriterTo).
func (b *reqBody) SupportsBodyWriteTo() bool { return true }

var _ fasthttp.BodyWriterTo = (*reqBody)(nil)

var largeBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// copyLarge copies r to w through a pooled 64 KiB buffer.
func copyLarge(w io.Writer, r io.Reader) (int64, error) {
	bp := largeBufs.Get().(*[]byte)
	defer largeBufs.Put(bp)
	var n int64
	for {
		m, err := r.Read(*bp)
		if m > 0 {
			wm, werr := w.Write((*bp)[:m])
			n += int64(wm)
			if werr != nil {
				return n, werr
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// reason is how the client's body ended the call ("" if it did not).
func (b *reqBody) reason() string {
	switch {
	case b == nil || b.err == nil:
		return ""
	case errors.Is(b.err, errRequestTooLarge):
		return reasonTooLargeIn
	}
	return reasonBadRequest
}

// readyBody readies a request body src of length cl (-1: unknown) that
// is still to be read: read whole into the request when it is within the
// route's buffer limit, else streamed through a reqBody (and the call may
// not be retried). conn is the client's connection, whose read deadline
// moves while the body streams (nil: none). It answers and returns false
// when the body is over the size limit or cannot be read.
func (g *Gateway) readyBody(ctx *fasthttp.RequestCtx, r *routeRT, k *call, src io.Reader, cl int, conn net.Conn) bool {
	req := &ctx.Request
	max := int64(g.opts.MaxRequestBytes)
	if max > 0 && int64(cl) > max {
		k.reason, k.status = reasonTooLargeIn, fasthttp.StatusRequestEntityTooLarge
		ctx.SetConnectionClose() // what is left of the body is not read
		g.localReply(ctx, k.status, k.c.name, k.reason, "request body of "+strconv.Itoa(cl)+" bytes is larger than the limit of "+strconv.FormatInt(max, 10))
		return false
	}
	limit := r.spec.bufferLimit
	if max > 0 {
		limit = min(limit, max)
	}
	if cl >= 0 && int64(cl) <= limit {
		buf := bodyBufs.Get().(*[]byte)
		defer bodyBufs.Put(buf)
		if cap(*buf) < cl {
			*buf = make([]byte, cl)
		}
		b := (*buf)[:cl]
		if _, err := io.ReadFull(src, b); err != nil {
			return g.badBody(ctx, k, err)
		}
		// The stream is at its end: the body buffer it read from may take
		// the body (fasthttp copies b in).
		req.SetBody(b)
		k.bytesIn = int64(cl)
		return true
	}
	rb := &reqBody{r: src, conn: conn, idle: g.opts.RequestReadTimeout, deadline: k.deadline, max: max}
	if cl < 0 {
		// Chunked: buffered while it fits the limit, streamed past it.
		head := make([]byte, 0, min(limit+1, 64<<10))
		var err error
		head, err = readUpTo(rb, head, limit+1)
		if err != nil {
			if rb.reason() == reasonTooLargeIn {
				return g.tooLarge(ctx, k)
			}
			return g.badBody(ctx, k, err)
		}
		if int64(len(head)) <= limit {
			req.SetBody(head)
			k.bytesIn = int64(len(head))
			return true
		}
		rb.r = io.MultiReader(bytes.NewReader(head), src)
		rb.n = 0
	}
	req.SetBodyStream(rb, cl)
	k.body = rb
	return true
}

// readUpTo appends to dst from r until EOF or n bytes.
func readUpTo(r io.Reader, dst []byte, n int64) ([]byte, error) {
	for int64(len(dst)) < n {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		m, err := r.Read(dst[len(dst):min(int64(cap(dst)), n)])
		dst = dst[:len(dst)+m]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// badBody answers a request whose body could not be read (truncated,
// malformed chunks, too slow).
func (g *Gateway) badBody(ctx *fasthttp.RequestCtx, k *call, err error) bool {
	k.reason, k.status = reasonBadRequest, fasthttp.StatusBadRequest
	ctx.SetConnectionClose()
	g.localReply(ctx, k.status, k.c.name, k.reason, "cannot read the request body: "+err.Error())
	return false
}

func (g *Gateway) tooLarge(ctx *fasthttp.RequestCtx, k *call) bool {
	k.reason, k.status = reasonTooLargeIn, fasthttp.StatusRequestEntityTooLarge
	ctx.SetConnectionClose()
	g.localReply(ctx, k.status, k.c.name, k.reason, "request body larger than the limit of "+strconv.Itoa(g.opts.MaxRequestBytes)+" bytes")
	return false
}

// streamTail counts a streamed answer's body and, once it ended, counts
// and records its call. Armed by the handler that forwarded the call
// (nothing to record otherwise); the server's goroutine reads the body.
type streamTail struct {
	g     *Gateway // nil: not armed
	k     call
	r     *routeRT
	mdKey string
	start time.Time
	n     int64
	err   error // the upstream's, mid-body
}

// tailOf returns the tail of an answer whose body streams, or nil.
func tailOf(resp *fasthttp.Response) *streamTail {
	switch b := resp.BodyStream().(type) {
	case *upBody:
		return &b.tail
	case *h2Body:
		return &b.tail
	}
	return nil
}

func (t *streamTail) arm(g *Gateway, k *call, r *routeRT, mdKey string, start time.Time) {
	t.g, t.k, t.r, t.mdKey, t.start = g, *k, r, mdKey, start
}

func (t *streamTail) read(n int, err error) {
	t.n += int64(n)
	if err != nil && err != io.EOF {
		t.err = err
	}
}

// end records the call; h holds the answer's trailers.
func (t *streamTail) end(h *fasthttp.ResponseHeader) {
	if t.g == nil {
		return
	}
	if t.err != nil {
		t.k.reason = reasonReset
		if errors.Is(t.err, fasthttp.ErrTimeout) {
			t.k.reason = reasonTimeout
		}
	}
	eachTrailer(h, func(k, v []byte) {
		if bytes.EqualFold(k, []byte("grpc-status")) {
			t.k.grpc = parseGRPCStatus(string(v))
		}
	})
	lat := time.Since(t.start)
	t.k.c.m.observe(t.k.status, lat)
	t.k.endTrace(lat)
	if t.g.rec != nil {
		t.g.recordCall(&t.k, t.r, t.mdKey, t.start, lat, t.n)
	}
	if t.k.actx != nil {
		t.g.logAccess(t.k.actx, t.k.logs, &t.k, t.r.name, t.start, lat, t.n)
	}
}

// eachTrailer calls f with each trailer field an answer received.
func eachTrailer(h *fasthttp.ResponseHeader, f func(k, v []byte)) {
	th := h.TrailerHeader()
	for len(th) > 0 {
		line := th
		if i := bytes.IndexByte(th, '\n'); i >= 0 {
			line, th = th[:i], th[i+1:]
		} else {
			th = nil
		}
		k, v, ok := bytes.Cut(bytes.TrimRight(line, "\r"), []byte{':'})
		if ok && len(k) > 0 {
			f(k, bytes.TrimSpace(v))
		}
	}
}

// recordCall hands a call to the recorder.
func (g *Gateway) recordCall(k *call, r *routeRT, mdKey string, start time.Time, lat time.Duration, out int64) {
	c := k.c
	if mdKey == "" {
		// A control plane that makes one cluster per subset (Sextant's,
		// Istio's) routes with no metadata match: the cluster names it.
		mdKey = c.spec.subsetName
	}
	in := k.bytesIn
	if k.body != nil {
		in = k.body.n
	}
	g.rec.Record(calllog.Record{
		Start:      start.UnixNano(),
		Latency:    lat,
		Service:    c.spec.service,
		Cluster:    c.name,
		Route:      r.name,
		Subset:     mdKey,
		Endpoint:   k.endpoint,
		Status:     uint16(k.status),
		Retries:    uint8(min(k.retries, 255)),
		Reason:     calllog.ReasonCode(k.reason),
		BytesIn:    uint32(min(in, 1<<32-1)),
		BytesOut:   uint32(min(out, 1<<32-1)),
		GRPCStatus: grpcRecord(k.grpc),
		Detail:     k.detail,
		Principal:  k.src.principal,
		Subject:    k.src.subject,
		Method:     k.src.method,
		Path:       k.src.path,
		Host:       k.src.host,
		Port:       k.src.port,
		PeerIP:     k.src.peer,
		Conn:       k.src.conn,
		Upstream:   c.tls.peer(k.endpoint),
		TraceID:    k.tr.traceID(),
	})
}
