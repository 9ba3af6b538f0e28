package gateway

import (
	"bufio"
	"bytes"

	"github.com/valyala/fasthttp"
)

// passReq is a client's request head written upstream as it came (the
// wire block fasthttp's parser keeps, RawHeaders), with prepareRequest's
// edits made in the bytes: its X-Forwarded-For, X-Forwarded-Proto and Via
// lines replaced, an X-Request-Id added when it had none, the Host the
// gateway serves it under if that is another. fasthttp's Request.Write
// builds the head anew from the parsed fields, after SetCanonical has
// looked each edited name up: together 6% of an HTTP/1.1 call's user CPU
// (issue 48). Only a request nothing else edits takes it (call.passReq);
// the rest is written by fasthttp as before.
type passReq struct {
	ok    bool    // the current call's request goes out so
	drop  [8]span // raw lines left out, in order
	ndrop int
	// The edits' values, set by prepareRequest.
	xff, via []byte
	proto    []byte // protoHTTP or protoHTTPS
	rid      [32]byte
	newID    bool // rid is the gateway's, to add
	host     bool // the Host line was left out: h.Host() goes instead
	buf      []byte
}

// scan takes h's wire block apart for write: true if every line is one
// write can pass on (a field, CRLF-ended, not folded) and h has a Host.
// XFF lines are left out (prepareRequest joins their values with the
// client's address); the first X-Forwarded-Proto and Via lines too, as
// SetCanonical replaces the first; the Host line if h's Host is not its;
// hop-by-hop lines, as dropHopHeaders drops them (a Connection that says
// more than keep-alive, or a request that closes its connection, is left
// to it).
func (pr *passReq) scan(h *fasthttp.RequestHeader) bool {
	if h.ConnectionClose() || !h.IsHTTP11() {
		return false // (fasthttp's path sends an HTTP/1.0 request on as one)
	}
	raw := h.RawHeaders()
	pr.ndrop, pr.host, pr.newID = 0, false, false
	if len(raw) < 2 || string(raw[len(raw)-2:]) != "\r\n" {
		return false
	}
	host := h.Host()
	if len(host) == 0 {
		return false
	}
	proto, via, hostSeen := false, false, false
	for i := 0; i+1 < len(raw); {
		if raw[i] == '\r' {
			return raw[i+1] == '\n' && i+2 == len(raw) && hostSeen
		}
		start := i
		name, vs, ve, next := scanField(raw, i)
		if next == 0 {
			return false
		}
		i = next
		drop := false
		switch len(name) {
		case 2, 7, 16, 18, 19:
			drop = isHopName(name)
		case 10:
			if bytes.EqualFold(name, nameConnection) {
				if c, _, other := connectionTokens(raw[vs:ve]); c || other {
					return false // closing, or naming fields: fasthttp's
				}
				drop = true
			} else {
				drop = isHopName(name) // Keep-Alive
			}
		case 3:
			drop = !via && bytes.EqualFold(name, nameVia)
			via = via || drop
		case 4:
			if bytes.EqualFold(name, []byte("Host")) {
				if hostSeen {
					return false // twice: fasthttp's to judge
				}
				hostSeen = true
				drop = !bytes.Equal(raw[vs:ve], host)
				pr.host = drop
			}
		case 15:
			drop = bytes.EqualFold(name, nameForwardedFor)
		case 17:
			drop = !proto && bytes.EqualFold(name, nameForwardedProto)
			proto = proto || drop
		}
		if drop {
			if pr.ndrop == len(pr.drop) {
				return false
			}
			pr.drop[pr.ndrop] = span{start, i}
			pr.ndrop++
		}
	}
	return false
}

// passReq returns the request's passReq (the connection's) if its head may
// go upstream as it came: the call passes its answer head (no route
// filters), nothing else edits its head (no subset field, no
// RBAC or JWT, no tracing, no rewrite, no mirror, no access log, which
// reads the edited fields) and it has no body, its cluster speaks HTTP/1.1
// and scan can pass on each of its lines. nil: prepareRequest edits the
// parsed head, which fasthttp writes.
func (k *call) passReq(ctx *fasthttp.RequestCtx, t *table, r *routeRT, c *clusterRT, head requestHead) *passReq {
	if k.pass == nil {
		return nil
	}
	k.pass.req.ok = false
	h := &ctx.Request.Header
	if head&headSubset != 0 || len(t.rbac) > 0 || t.tracing != nil || len(k.logs) > 0 ||
		r.spec.rewrite != "" || len(r.mirrors) > 0 || c.spec.h2c || !(h.IsGet() || h.IsHead()) ||
		ctx.Request.IsBodyStream() || len(ctx.Request.Body()) > 0 {
		return nil
	}
	if u := h.RequestURI(); len(u) == 0 || u[0] != '/' {
		return nil
	}
	if pr := &k.pass.req; pr.scan(h) {
		return pr
	}
	return nil
}

// preparePass is prepareRequest's edits for a request whose head goes
// upstream as it came: their values go to pr (the X-Forwarded-For lines'
// values joined, the client's address after them; the first Via's with
// the gateway's after it), and the request id sent to id.
func preparePass(ctx *fasthttp.RequestCtx, head requestHead, id *requestID, pr *passReq) {
	h := &ctx.Request.Header
	pr.xff = pr.xff[:0]
	if head&headForwarded != 0 {
		for _, v := range h.PeekAll("X-Forwarded-For") {
			if len(v) > 0 {
				pr.xff = append(append(pr.xff, v...), ", "...)
			}
		}
	}
	pr.xff = appendPeerIP(pr.xff, ctx)
	pr.proto = protoHTTP
	if ctx.IsTLS() {
		pr.proto = protoHTTPS
	}
	var rid []byte
	if head&headRequestID != 0 {
		rid = h.Peek("X-Request-Id")
	}
	if pr.newID = len(rid) == 0; pr.newID {
		newRequestID(&pr.rid)
		rid = pr.rid[:]
	}
	id.keep(rid)
	pr.via = pr.via[:0]
	if head&headVia != 0 {
		if v := h.Peek("Via"); len(v) > 0 {
			pr.via = append(append(pr.via, v...), ", "...)
		}
	}
	pr.via = append(pr.via, viaValue...)
	pr.ok = true
}

// write writes h's head upstream: its request line (HTTP/1.1), the raw
// lines but those scan left out, then the edits. The request has no body
// (call.passReq).
func (pr *passReq) write(w *bufio.Writer, h *fasthttp.RequestHeader) error {
	raw := h.RawHeaders()
	b := w.AvailableBuffer()
	own := cap(b) < len(raw)+len(h.RequestURI())+len(pr.xff)+len(pr.via)+len(h.Host())+160 // may not fit: pr.buf's
	if own {
		b = pr.buf[:0]
	}
	b = append(b, h.Method()...)
	b = append(b, ' ')
	b = append(b, h.RequestURI()...)
	b = append(b, " HTTP/1.1\r\n"...)
	from := 0
	for _, d := range pr.drop[:pr.ndrop] {
		b = append(b, raw[from:d.from]...)
		from = d.to
	}
	b = append(b, raw[from:len(raw)-2]...)
	if pr.host {
		b = appendField(b, "Host: ", h.Host())
	}
	b = appendField(b, "X-Forwarded-For: ", pr.xff)
	b = appendField(b, "X-Forwarded-Proto: ", pr.proto)
	if pr.newID {
		b = appendField(b, "X-Request-Id: ", pr.rid[:])
	}
	b = appendField(b, "Via: ", pr.via)
	b = append(b, crlf...)
	_, err := w.Write(b)
	if own {
		pr.buf = b[:0]
	}
	return err
}

func appendField(b []byte, name string, v []byte) []byte {
	b = append(b, name...)
	b = append(b, v...)
	return append(b, crlf...)
}

// apply makes the edits in h instead, for an upstream that does not
// write the raw head (an HTTP/2 endpoint's: not chosen for such clusters,
// but a pool's kind is the endpoint's).
func (pr *passReq) apply(h *fasthttp.RequestHeader) {
	pr.ok = false
	h.DelBytes(nameForwardedFor)
	h.SetCanonical(nameForwardedFor, pr.xff)
	h.SetCanonical(nameForwardedProto, pr.proto)
	if pr.newID {
		h.SetCanonical(nameRequestID, pr.rid[:])
	}
	h.SetCanonical(nameVia, pr.via)
}
