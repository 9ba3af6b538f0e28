package gateway

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/subset"
)

// SubsetHeader lets a request choose its subset (MOSN's header-driven
// routing): "x-sextant-subset: version=v2,zone=z1". Its pairs overlay the
// route's metadata_match; the gateway removes it before forwarding.
const SubsetHeader = "X-Sextant-Subset"

// ErrorHeader names the reason of a reply the gateway made itself.
const ErrorHeader = "X-Sextant-Error"

const (
	viaValue = "1.1 sextant"
	// maxResponseBytes bounds the answer of an endpoint that refused an
	// upgrade (upgrade.go); other answers stream.
	maxResponseBytes = 64 << 20
)

// The names prepareRequest and answer set, canonical (SetCanonical), and
// the values they set most.
var (
	nameForwardedFor   = []byte("X-Forwarded-For")
	nameForwardedProto = []byte("X-Forwarded-Proto")
	nameRequestID      = []byte("X-Request-Id")
	nameVia            = []byte("Via")
	viaBytes           = []byte(viaValue)
	protoHTTP          = []byte("http")
	protoHTTPS         = []byte("https")
)

// Reasons of calls that did not get an upstream answer; they name the
// X-Sextant-Error header and the "reason" of the JSON error body.
const (
	reasonNoRoute         = "no_route"
	reasonNoCluster       = "cluster_not_found"
	reasonNoHealthy       = "no_healthy_endpoint"
	reasonNoSubset        = "no_subset"
	reasonShed            = "shed"
	reasonTimeout         = "upstream_timeout"
	reasonConnect         = "connect_failure"
	reasonTLS             = "tls_failure" // the TLS handshake with an endpoint failed
	reasonReset           = "upstream_reset"
	reasonTooLarge        = "response_too_large"
	reasonOverflow        = "pool_overflow"
	reasonBadSubsetHeader = "bad_subset_header"
)

// hopHeaders are removed in both directions (RFC 9110 7.6.1), with the
// names a Connection header lists.
var http11 = []byte("HTTP/1.1")

var hopHeaders = []string{"Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Upgrade"}

// serve is the data path: route, pick, forward with retries, record.
// fasthttp calls it on the connection's goroutine.
func (g *Gateway) serve(ctx *fasthttp.RequestCtx) { g.serveOn(ctx, g.table.Load(), nil) }

// serveH1 is serve for the HTTP/1.1 server, which lends the call ph.
func (g *Gateway) serveH1(ctx *fasthttp.RequestCtx, ph *passHead) { g.serveOn(ctx, g.table.Load(), ph) }

// serveOn serves a call with routing table t (a TLS filter chain's, or the
// plaintext listener's); nil: no configuration yet. ph, if not nil, may
// take the endpoint's answer head to be written on as it came, when
// nothing edits the answer but the gateway's own fields (h1pass.go).
func (g *Gateway) serveOn(ctx *fasthttp.RequestCtx, t *table, ph *passHead) {
	if !versionSupported(ctx) {
		g.refuseVersion(ctx)
		return
	}
	start := ctx.Time() // the server's clock read before it called serve: one less
	if start.IsZero() {
		start = time.Now()
	}
	head := scanRequestHead(&ctx.Request.Header) // hop.go
	r, c, md, mdKey, dest := g.routeCall(ctx, t, start, head)
	if c == nil {
		if t != nil && len(t.logs) > 0 {
			g.logAccess(ctx, t.logs, nil, "", start, time.Since(start), -1)
		}
		return
	}
	// Upgrade is a hop-by-hop field, so the head's scan says whether a
	// client asked for one; a route's filters, or the JWT filter's
	// claim_to_headers, may have added it since (two header lookups less
	// a request otherwise: 1.4% of its user samples).
	if head&headHop != 0 || r.spec.filters != nil || len(t.rbac) > 0 {
		if typ := upgradeType(&ctx.Request.Header); typ != "" {
			g.serveUpgrade(ctx, t, r, typ, c, md, mdKey, start)
			return
		}
	}
	k := call{c: c, retry: &r.spec.retry, md: md, grpc: -1, detail: rbacShadow(ctx), filters: r.spec.filters, dest: dest, logs: t.logs, start: start}
	var setCookie string
	if len(r.spec.hash) > 0 {
		k.hash, k.hashed, setCookie = callHash(ctx, r.spec.hash)
	}
	if g.rec != nil {
		k.src = sourceOf(ctx) // before prepareRequest rewrites the request
	}
	g.startTrace(ctx, t.tracing, &k.tr, false)
	k.noteURI(ctx, r)
	if ph != nil && k.filters == nil && setCookie == "" {
		k.pass = ph
	}
	g.prepareRequest(ctx, r, head, &k.rid, k.passReq(ctx, t, r, c, head))
	k.tr.noteRequestID(&k.rid, &ctx.Request.Header)
	if r.spec.timeout > 0 {
		k.deadline = start.Add(r.spec.timeout)
	}
	k.idle = streamIdle(t, r)
	if ctx.Request.IsBodyStream() && !g.readyBody(ctx, r, &k, ctx.RequestBodyStream(), ctx.Request.Header.ContentLength(), ctx.Conn()) {
		g.finish(ctx, &k, r, mdKey, start)
		return
	}
	if len(r.mirrors) > 0 {
		g.mirror(ctx, r, r.spec.timeout)
	}
	k.forward(&ctx.Request, &ctx.Response)
	if setCookie != "" {
		ctx.Response.Header.Add(fasthttp.HeaderSetCookie, setCookie)
	}
	g.answer(ctx, &k)
	if t := tailOf(&ctx.Response); t != nil {
		// The answer streams: the server writes it once this returns, and
		// its end counts and records the call.
		if len(k.logs) > 0 {
			k.actx = ctx // still the call's while the server writes the answer
		}
		t.arm(g, &k, r, mdKey, start)
		return
	}
	g.finish(ctx, &k, r, mdKey, start)
}

// finish counts and records a call whose answer is ready.
func (g *Gateway) finish(ctx *fasthttp.RequestCtx, k *call, r *routeRT, mdKey string, start time.Time) {
	// The last try's end is the answer's: what is done since (a local
	// reply, the answer's filters) reads no clock and waits for nothing,
	// and a clock read is 0.7% of a request's user CPU on KVM (issue 48).
	end := k.answered
	if end.IsZero() {
		end = time.Now()
	}
	lat := end.Sub(start)
	k.c.m.observe(k.status, lat)
	k.endTrace(lat)
	if g.rec != nil {
		if k.body == nil && !ctx.Request.IsBodyStream() { // (a stream refused unread stays unread)
			k.bytesIn = int64(len(ctx.Request.Body()))
		}
		g.recordCall(k, r, mdKey, start, lat, int64(len(ctx.Response.Body())))
	}
	if len(k.logs) > 0 {
		g.logAccess(ctx, k.logs, k, r.name, start, lat, -1)
	}
}

// routeCall finds the request's route in table t (nil: no configuration
// yet) and its cluster, with the metadata to
// pick its endpoint by, and runs the route's filters' request hooks. With no
// cluster to call (no route, a redirect, a direct response, a filter's
// answer, a bad subset header) it answers the request and returns a nil
// cluster. dest is the index of the route's target picked (-1: none).
// start is the call's: a call a filter answers is timed from it. head
// says which fields the request came with (hop.go).
func (g *Gateway) routeCall(ctx *fasthttp.RequestCtx, t *table, start time.Time, head requestHead) (r *routeRT, c *clusterRT, md map[string]string, mdKey string, dest int) {
	if t == nil {
		g.localReply(ctx, fasthttp.StatusServiceUnavailable, "", reasonNoRoute, "no configuration received from the control plane yet")
		return nil, nil, nil, "", -1
	}
	var hostBuf [256]byte
	r, host := g.route(ctx, t, hostBuf[:0])
	if r == nil {
		return nil, nil, nil, "", -1
	}
	if len(t.rbac) > 0 && !g.authorize(ctx, t, r) {
		return nil, nil, nil, "", -1
	}
	dest = -1
	if len(r.targets) > 0 {
		dest = r.pickIndex()
	}
	if fc := r.spec.filters; fc != nil {
		if fc.request(ctx, dest) {
			g.recordAnswered(ctx, r, dest, start)
			return nil, nil, nil, "", dest
		}
	}
	if d := r.spec.direct; d != nil {
		ctx.SetStatusCode(d.status)
		ctx.SetBodyString(d.body)
		if fc := r.spec.filters; fc != nil {
			fc.response(ctx, answerHeader(&ctx.Response.Header), -1)
		}
		return nil, nil, nil, "", -1
	}
	if rd := r.spec.redirect; rd != nil {
		redirect(ctx, rd, r.spec.match.value, host)
		return nil, nil, nil, "", -1
	}
	// A route's filters, or the JWT filter's claim_to_headers, may have
	// added the subset header.
	subset := head&headSubset != 0 || r.spec.filters != nil || len(t.rbac) > 0
	c, md, mdKey = g.target(ctx, t, &r.targets[dest], subset)
	return r, c, md, mdKey, dest
}

// route finds the request's route, after bringing an absolute-form target
// to origin form. host is the request's host in lower case, in hostBuf
// when it fits. With no route it answers the request and returns nil.
func (g *Gateway) route(ctx *fasthttp.RequestCtx, t *table, hostBuf []byte) (r *routeRT, host []byte) {
	h := &ctx.Request.Header
	if h.IsConnect() {
		// As Envoy without a connect_matcher: tunnels are not proxied.
		g.localReply(ctx, fasthttp.StatusNotFound, "", reasonNoRoute, "CONNECT is not proxied")
		return nil, nil
	}
	if u := h.RequestURI(); len(u) > 0 && u[0] != '/' {
		if err := originForm(h); err != nil {
			g.localReply(ctx, fasthttp.StatusBadRequest, "", "bad_request", err.Error())
			return nil, nil
		}
	}
	host = lower(hostBuf, h.Host())
	if !validHostPort(host) {
		// vhost drops what follows the last ':' while policies match the
		// Host whole: a port that is not one must not reach either.
		g.localReply(ctx, fasthttp.StatusBadRequest, "", "bad_request", "Host "+strconv.Quote(string(host))+": the part after ':' is not a port")
		return nil, nil
	}
	uri := h.RequestURI()
	path := uri
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		path = uri[:i]
	}
	vh := t.vhost(host)
	if vh != nil {
		r = vh.route(path, h, ctx.IsTLS())
	}
	if r == nil {
		msg := "no route for host " + strconv.Quote(string(host)) + " path " + strconv.Quote(string(path))
		if vh != nil && vh.dropped != "" {
			msg += "; routes left out by the control plane: " + vh.dropped
		}
		g.localReply(ctx, fasthttp.StatusNotFound, "", reasonNoRoute, msg)
		return nil, nil
	}
	return r, host
}

// validHostPort reports whether a Host's port, if it has one (after the
// last ':' outside an IPv6 literal's brackets), is 1 to 5 digits.
func validHostPort(host []byte) bool {
	i := bytes.LastIndexByte(host, ':')
	if i < 0 || bytes.IndexByte(host[i:], ']') >= 0 {
		return true
	}
	port := host[i+1:]
	if len(port) == 0 || len(port) > 5 {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// target returns the cluster of the route's weighted target tg with
// the metadata to pick its endpoints by (the route's, overlaid by the
// SubsetHeader, which it removes; none if the cluster has no subsets).
// With no usable cluster it answers the request and returns nil.
func (g *Gateway) target(ctx *fasthttp.RequestCtx, t *table, tg *target, subset bool) (c *clusterRT, md map[string]string, mdKey string) {
	c = tg.cluster
	if c == nil {
		msg := "cluster " + strconv.Quote(tg.name) + " is not in the configuration"
		if why, ok := t.unsupported[tg.name]; ok {
			msg = "cluster " + strconv.Quote(tg.name) + ": " + why
		}
		g.localReply(ctx, fasthttp.StatusServiceUnavailable, tg.name, reasonNoCluster, msg)
		return nil, nil, ""
	}
	md, mdKey = tg.md, tg.mdKey
	h := &ctx.Request.Header
	if subset { // subset: the request may have SubsetHeader
		if hv := h.Peek(SubsetHeader); hv != nil {
			var err error
			if md, mdKey, err = overlaySubset(md, hv); err != nil {
				g.localReply(ctx, fasthttp.StatusBadRequest, c.name, reasonBadSubsetHeader, err.Error())
				return nil, nil, ""
			}
			h.Del(SubsetHeader)
		}
	}
	if !c.useMD {
		md, mdKey = nil, ""
	}
	return c, md, mdKey
}

// streamIdle is the stream idle timeout of a call on route r of table t:
// the route's idle_timeout, else the listener's stream_idle_timeout.
func streamIdle(t *table, r *routeRT) time.Duration {
	if r.spec.idle != nil {
		return *r.spec.idle
	}
	return t.streamIdle
}

// call is the state of one call across its attempts at a cluster; it
// lives on serve's stack.
type call struct {
	c        *clusterRT
	retry    *retrySpec
	md       map[string]string
	deadline time.Time     // zero: none
	idle     time.Duration // the stream idle timeout; 0: none

	body    *reqBody // the request body, when it streams (not retriable)
	bytesIn int64    // the request body's bytes, when buffered
	grpc    int      // grpc-status of the last answer; -1: none
	te      bool     // an HTTP/2 client's te: trailers, sent on to an HTTP/2 endpoint

	retries  int
	status   int        // of the last answer; 0 if it got none
	reason   string     // why the last attempt got no usable answer
	detail   string     // the call record's detail (rbac.go)
	src      callSource // the call record's request and connection (rbac.go); with a Recorder only
	endpoint string     // address of the last endpoint tried
	err      error      // of the last attempt; nil: the response is upstream's
	permit   bool       // a retry-budget permit is held for this attempt
	tried    [11]string // endpoints tried (num_retries is at most 10)
	// levels: the priority levels of the endpoints tried (a bit per level,
	// levelBit); skip: those a retry's pick leaves out (retrySpec.otherLevel).
	levels, skip uint64

	filters filterChain // the route's (filter.go), run on the answer
	dest    int         // the route's target picked, for the filters

	hash   uint64 // the call's hash by the route's hash policies (hash.go)
	hashed bool   // hash is set: a consistent-hash cluster picks by it

	tr  callTrace // tracing.go
	rid requestID // the X-Request-Id sent upstream, for the answer
	// pass: the HTTP/1.1 connection's, for an answer head to go out as it
	// came (h1pass.go); nil: the answer is parsed into ctx.Response.
	pass *passHead

	upLat time.Duration // the last try's, until its answer (the access log's upstream service time)
	// answered is when the last try ended (zero: none did), finish's end
	// of the call.
	answered time.Time
	// start is the call's (the server's clock read): now reads the clock
	// from it, and its spans are placed from its wall reading (tracing.go);
	// zero: now reads the clock whole.
	start time.Time
	logs  []accessLogSpec // the listener's access logs (accesslog.go)
	uri   []byte          // the request URI before a rewrite, when logs are on and the route rewrites
	// actx is the request of an HTTP/2 call (h2) with logs on, for the
	// access log at its end.
	actx *fasthttp.RequestCtx
	h2   bool
}

// now is the time, read from the call's start: one clock read (the
// monotonic one) where time.Now takes two, and the call's times all on its
// start's wall reading, so that they stay in order (issue 48: a clock read
// is 1% of an HTTP/1.1 request's user CPU on KVM, two per try).
func (k *call) now() time.Time {
	if k.start.IsZero() {
		return time.Now()
	}
	return k.start.Add(time.Since(k.start))
}

// forward sends the request upstream, and again while the route's retry
// policy, its deadline and the cluster's retry budget allow.
func (k *call) forward(req *fasthttp.Request, resp *fasthttp.Response) {
	c := k.c
	c.active.Add(1)
	c.noteCall()
	for k.attempt(req, resp) && k.mayRetry() {
		if !k.backoff(k.retries + 1) {
			c.retries.Add(-1) // the permit mayRetry took
			break
		}
		k.permit = true
		k.retries++
		c.m.retries.Inc()
	}
	c.active.Add(-1)
}

// mayRetry reports whether the attempt that just ended may be retried,
// taking a retry-budget permit if so.
func (k *call) mayRetry() bool {
	return k.body == nil && k.retry.retriable(k.reason, k.status, k.grpc, k.err) && k.retries < k.retry.num &&
		(k.deadline.IsZero() || k.now().Before(k.deadline)) && k.c.allowRetry()
}

// attempt picks an endpoint and sends the request to it once; false if no
// endpoint could be picked.
func (k *call) attempt(req *fasthttp.Request, resp *fasthttp.Response) bool {
	k.answered = time.Time{} // a try that sends nothing leaves finish a clock to read
	res, lv, ep := k.pick()
	if ep == nil {
		return false
	}
	if k.c.cb != nil && !k.enterCircuit(res) {
		return true // answered by the circuit breakers (circuit.go)
	}
	k.endpoint = ep.addr
	k.tried[k.retries] = res.Host.ID
	k.levels |= levelBit(lv)
	try := k.deadline
	if pt := k.retry.perTry; pt > 0 {
		if d := k.now().Add(pt); try.IsZero() || d.Before(try) {
			try = d
		}
	}
	if k.retries > 0 {
		resp.Reset()
	}
	span := k.tr.tryTrace(&req.Header)
	t0 := k.now()
	err := ep.up.do(req, resp, k.pass, t0, try, k.idle)
	k.answered = k.now()
	lat := k.answered.Sub(t0)
	if k.c.cb != nil {
		k.c.cb.leave()
	}
	k.release()
	var outcome balancer.Outcome
	outcome, k.reason = classify(err, resp.StatusCode())
	if err == nil {
		if k.pass != nil && k.pass.ok {
			k.grpc = parseGRPCStatus(string(k.pass.grpcStatus()))
		} else {
			k.grpc = parseGRPCStatus(string(resp.Header.Peek("Grpc-Status")))
		}
		if k.grpc >= 0 && outcome == balancer.Success {
			outcome = grpcOutcome(k.grpc)
		}
	} else if why := k.body.reason(); k.body != nil && why != "" {
		// The client's body broke the call, not the endpoint.
		outcome, k.reason, err = balancer.Canceled, why, k.body.err
	}
	res.Done(lat, outcome)
	k.err = err
	k.status = resp.StatusCode()
	k.upLat = lat
	if err != nil {
		k.status = 0
	}
	ep.m.observe(k.status, lat)
	if span.IsValid() {
		k.endTry(span, t0, lat, ep.addr)
	}
	return true
}

// pick picks the attempt's endpoint, avoiding those tried and the levels
// tried if the route says so, and returns the level it is of. With none it
// returns the permit, sets the call's reason and error, and returns a nil
// endpoint.
func (k *call) pick() (subset.Result, uint32, *endpoint) {
	c := k.c
	skip := k.levelsLeftOut()
	for range maxRepicks {
		res, lv, err := c.lb.pickSkip(k.md, k.hash, k.hashed, skip)
		if err == nil && k.retries > 0 && k.retry.otherHost {
			res, lv, err = pickAgain(c, k.md, res, lv, k.tried[:k.retries], k.retry.hostPicks, skip)
		}
		if err != nil {
			k.release()
			k.reason, k.err = pickReason(err), err
			if k.reason == reasonShed {
				c.m.shed.Inc()
			}
			return res, lv, nil
		}
		if ep := c.endpointFor(res.Host.ID); ep != nil {
			return res, lv, ep
		}
		// Removed between the pick and now (setHosts): the balancer no
		// longer has it, so pick again rather than fail the call.
		res.Done(0, balancer.Canceled)
	}
	k.release()
	k.reason, k.err = reasonNoHealthy, subset.ErrNoHealthyHost
	return subset.Result{}, 0, nil
}

// maxRepicks bounds the picks of one attempt that land on endpoints
// removed meanwhile: each removal is one config update, so more than a
// few in a row means the cluster is being emptied.
const maxRepicks = 4

// levelsLeftOut is the levels this attempt's pick leaves out, as Envoy's
// previous_priorities retry priority: none until update_frequency
// attempts were made, then at every update_frequency-th attempt the
// levels of all the endpoints tried, kept until the next; levels is one
// bit per attempt or more, so attempts count as retries here.
func (k *call) levelsLeftOut() uint64 {
	f := k.retry.otherLevel
	if f == 0 || k.retries < f {
		return 0
	}
	if k.retries%f == 0 {
		k.skip = k.levels
	}
	return k.skip
}

// release returns the retry-budget permit, if one is held.
func (k *call) release() {
	if k.permit {
		k.c.retries.Add(-1)
		k.permit = false
	}
}

// answer completes the downstream response: the upstream's without its
// hop-by-hop headers, or the gateway's own if the call got no answer.
func (g *Gateway) answer(ctx *fasthttp.RequestCtx, k *call) {
	resp := &ctx.Response
	if k.err != nil {
		code, msg := replyFor(k.reason, k.c.name, k.err)
		if k.reason == reasonTooLargeIn || k.reason == reasonBadRequest {
			ctx.SetConnectionClose() // what is left of the body is not read
		}
		resp.Reset()
		if k.pass != nil {
			k.pass.ok = false
		}
		g.localReply(ctx, code, k.c.name, k.reason, msg)
		k.status = code
	} else if k.pass != nil && k.pass.ok {
		// The head goes out as it came, with the edits below made as it
		// is written (passHead.writeHead).
		k.reason = ""
		k.pass.id = append(k.pass.id[:0], k.rid.of(&ctx.Request.Header)...)
		return
	} else {
		// Dropping Connection keeps the downstream connection open
		// whatever the upstream said, and the answer goes out in the
		// downstream's HTTP/1.1 whatever version the upstream spoke (as
		// Envoy's codec does): an HTTP/1.0 status line would make the
		// client close its connection after every call (for a sidecar's
		// client, a TLS handshake per call).
		// Most answers carry no hop-by-hop header: one pass over the
		// headers finds that, where a Del per name copies and scans each
		// name (2% of a profile). (Not on the request: its All parses the
		// cookies, which would be written upstream re-encoded.)
		if hasHopHeader(&resp.Header) {
			dropAnswerHopHeaders(&resp.Header) // hop.go
		}
		if !resp.Header.IsHTTP11() {
			resp.Header.SetProtocol(http11)
		}
		resp.Header.SetCanonical(nameVia, viaBytes)
		k.reason = ""
		if k.filters != nil {
			k.filters.response(ctx, answerHeader(&resp.Header), k.dest)
		}
	}
	resp.Header.SetCanonical(nameRequestID, k.rid.of(&ctx.Request.Header))
}

// requestID is a call's X-Request-Id as prepareRequest left it, for the
// answer and the trace: looked up again, its name is normalized and the
// request's fields scanned (2.6% of an h2c call's user CPU, perf).
type requestID struct {
	b  [40]byte
	n  uint8
	ok bool // b[:n] is the id; false: not kept (longer, or not prepared), look it up
}

func (id *requestID) keep(v []byte) {
	if id == nil {
		return
	}
	if id.ok = len(v) <= len(id.b); id.ok {
		id.n = uint8(copy(id.b[:], v))
	}
}

// of returns the X-Request-Id of h, the request id was kept for.
func (id *requestID) of(h *fasthttp.RequestHeader) []byte {
	if id.ok {
		return id.b[:id.n]
	}
	return h.Peek("X-Request-Id")
}

// prepareRequest turns the downstream request into the upstream one, in
// place: hop-by-hop headers out, forwarding headers in, prefix rewrite.
// head says which of the fields involved the request may have (hop.go;
// h2sStream.fields): those it has not are not looked up. The names set are
// canonical, as the server's parsing made the request's (SetCanonical
// skips the normalized copy Set makes). The X-Request-Id sent is kept in
// id (nil: not kept). With pr, the request's head goes upstream as it
// came (h1passreq.go): the edits' values go to pr and h stays as parsed.
func (g *Gateway) prepareRequest(ctx *fasthttp.RequestCtx, r *routeRT, head requestHead, id *requestID, pr *passReq) {
	h := &ctx.Request.Header
	if pr != nil {
		preparePass(ctx, head, id, pr)
		return
	}
	if head&headHop != 0 {
		dropHopHeaders(h) // dropping Connection also keeps the upstream connection open
	}
	var ipBuf [64]byte
	clientIP := appendPeerIP(ipBuf[:0], ctx)
	var prior []byte
	if head&headForwarded != 0 {
		prior = forwardedFor(h)
	}
	if len(prior) > 0 {
		v := make([]byte, 0, len(prior)+2+len(clientIP))
		v = append(append(append(v, prior...), ", "...), clientIP...)
		h.SetCanonical(nameForwardedFor, v)
	} else {
		h.SetCanonical(nameForwardedFor, clientIP)
	}
	if ctx.IsTLS() {
		h.SetCanonical(nameForwardedProto, protoHTTPS)
		ctx.Request.URI().SetScheme("http") // the upstream leg is plaintext
	} else {
		h.SetCanonical(nameForwardedProto, protoHTTP)
	}
	var rid []byte
	if head&headRequestID != 0 {
		rid = h.Peek("X-Request-Id")
	}
	if len(rid) > 0 {
		id.keep(rid)
	} else {
		var hx [32]byte
		newRequestID(&hx)
		h.SetCanonical(nameRequestID, hx[:])
		id.keep(hx[:])
	}
	var via []byte
	if head&headVia != 0 {
		via = h.Peek("Via")
	}
	if len(via) > 0 {
		h.SetCanonical(nameVia, append(append(append([]byte(nil), via...), ", "...), viaValue...))
	} else {
		h.SetCanonical(nameVia, viaBytes)
	}
	if rw := r.spec.rewrite; rw != "" {
		uri := h.RequestURI()
		rest := uri[min(len(r.spec.match.value), len(uri)):]
		nu := make([]byte, 0, len(rw)+len(rest))
		nu = append(append(nu, rw...), rest...)
		// The Request's, not the header's: a URI parsed before (the call
		// log's, a query match's) would be written upstream instead.
		ctx.Request.SetRequestURIBytes(nu)
	}
}

// newRequestID makes an X-Request-Id: 128 random bits in hex.
func newRequestID(hx *[32]byte) {
	var b [16]byte
	u1, u2 := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		b[i], b[8+i] = byte(u1>>(8*i)), byte(u2>>(8*i))
	}
	hex.Encode(hx[:], b[:])
}

// dropHopHeaders removes a request's hop-by-hop headers: those the
// Connection header names (but close and keep-alive), Connection itself
// and hopHeaders. The fields the request repeats keep their values'
// order: fasthttp's Del moves the last field into a deleted one's place
// (Accept: a, Accept: b would go out as b, a), so they
// are taken out before the deletes and added back after (hop.go). (An
// answer's: dropAnswerHopHeaders.)
func dropHopHeaders(h *fasthttp.RequestHeader) {
	repeated := takeRepeated(h)
	for tok := range connectionNames(h.Peek("Connection")) {
		h.DelBytes(tok)
	}
	h.Del("Connection")
	for _, k := range hopHeaders {
		h.Del(k)
	}
	for _, kv := range repeated {
		h.AddBytesKV(kv[0], kv[1])
	}
}

// hasHopHeader reports whether the answer has Connection or one of
// hopHeaders.
func hasHopHeader(h *fasthttp.ResponseHeader) bool {
	for k := range h.All() {
		if isHopName(k) {
			return true
		}
	}
	return false
}

// isHopName reports whether k is Connection or one of hopHeaders.
func isHopName(k []byte) bool {
	switch len(k) {
	case 2, 7, 10, 16, 18, 19:
	default:
		return false
	}
	if bytes.EqualFold(k, []byte("Connection")) {
		return true
	}
	for _, h := range hopHeaders {
		if len(h) == len(k) && bytes.EqualFold(k, []byte(h)) {
			return true
		}
	}
	return false
}

// pickAgain hands back a pick of a host already tried and picks again
// (leaving out the levels in skip, as the first pick), at most n times;
// the last pick stands whatever it is (Envoy's
// host_selection_retry_max_attempts). It returns the pick's level.
func pickAgain(c *clusterRT, md map[string]string, res subset.Result, lv uint32, tried []string, n int, skip uint64) (subset.Result, uint32, error) {
	for range n {
		if !slices.Contains(tried, res.Host.ID) {
			return res, lv, nil
		}
		res.Done(0, balancer.Canceled)
		var err error
		if res, lv, err = c.lb.pickSkip(md, 0, false, skip); err != nil {
			return res, lv, err
		}
	}
	return res, lv, nil
}

// classify maps an attempt's result to the balancer outcome and a reason
// ("" for an upstream answer).
func classify(err error, status int) (balancer.Outcome, string) {
	if err == nil {
		switch {
		case status == fasthttp.StatusServiceUnavailable:
			return balancer.Rejected, ""
		case status >= 500:
			return balancer.Failed, ""
		}
		return balancer.Success, ""
	}
	var op *net.OpError
	var te *tlsError
	switch {
	case errors.As(err, &te) && te.local:
		return balancer.Canceled, reasonTLS // nothing learned of the endpoint
	case errors.As(err, &te):
		return balancer.Unreachable, reasonTLS
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return balancer.Timeout, reasonTimeout
	case errors.Is(err, fasthttp.ErrDialTimeout), errors.As(err, &op) && op.Op == "dial":
		return balancer.Unreachable, reasonConnect
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return balancer.Rejected, reasonOverflow
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return balancer.Failed, reasonTooLarge
	}
	return balancer.Unreachable, reasonReset
}

// retriable reports whether an attempt that ended so may be retried.
func (s *retrySpec) retriable(reason string, status, grpc int, err error) bool {
	if !s.defined || s.num == 0 {
		return false
	}
	if reason == "" && grpc >= 0 && s.grpcRetriable(grpc) {
		return true
	}
	switch reason {
	case "":
	case reasonConnect, reasonTLS:
		return s.on&(retry5xx|retryGatewayError|retryConnectFailure|retryReset) != 0
	case reasonReset, reasonTimeout:
		// The upstream may have acted on the request: only the conditions
		// that accept that, or refused-stream for a stream the upstream
		// says it did not process (an HTTP/2 REFUSED_STREAM, or past its
		// GOAWAY's last stream). It is in Istio's default policy on every
		// route, so reading it as "any reset" would resend non-idempotent
		// requests by default.
		if s.on&retryRefusedStream != 0 && errors.Is(err, errRefusedStream) {
			return true
		}
		return s.on&(retry5xx|retryGatewayError|retryReset) != 0
	default:
		return false
	}
	if status >= 500 && s.on&retry5xx != 0 {
		return true
	}
	if (status == 502 || status == 503 || status == 504) && s.on&retryGatewayError != 0 {
		return true
	}
	if status == 409 && s.on&retryRetriable4xx != 0 {
		return true
	}
	if s.on&retryRetriableCodes != 0 {
		for _, c := range s.codes {
			if c == status {
				return true
			}
		}
	}
	return false
}

func pickReason(err error) string {
	switch {
	case errors.Is(err, balancer.ErrShed):
		return reasonShed
	case errors.Is(err, subset.ErrNoSubset):
		return reasonNoSubset
	}
	return reasonNoHealthy
}

// replyFor is the status and message of a call that got no upstream answer.
func replyFor(reason, cluster string, err error) (int, string) {
	q := strconv.Quote(cluster)
	switch reason {
	case reasonShed:
		return fasthttp.StatusServiceUnavailable, "cluster " + q + ": shed, every endpoint is at capacity"
	case reasonNoSubset:
		return fasthttp.StatusServiceUnavailable, "cluster " + q + ": no subset matches the request's metadata"
	case reasonNoHealthy:
		return fasthttp.StatusServiceUnavailable, "cluster " + q + ": no healthy endpoint"
	case reasonOverflow:
		return fasthttp.StatusServiceUnavailable, "cluster " + q + ": connection pool full"
	case reasonTimeout:
		return fasthttp.StatusGatewayTimeout, "cluster " + q + ": upstream timeout"
	case reasonConnect:
		return fasthttp.StatusBadGateway, "cluster " + q + ": connect failure: " + err.Error()
	case reasonTLS:
		// 503 as Envoy answers a failed upstream TLS handshake.
		return fasthttp.StatusServiceUnavailable, "cluster " + q + ": TLS handshake failed: " + err.Error()
	case reasonTooLarge:
		return fasthttp.StatusBadGateway, "cluster " + q + ": upstream response larger than the limit"
	case reasonTooLargeIn:
		return fasthttp.StatusRequestEntityTooLarge, "request body larger than the limit"
	case reasonBadRequest:
		return fasthttp.StatusBadRequest, "cannot read the request body: " + err.Error()
	}
	return fasthttp.StatusBadGateway, "cluster " + q + ": upstream reset before a complete answer: " + err.Error()
}

// localReply answers for the gateway itself with a JSON error body naming
// the cluster and the reason.
func (g *Gateway) localReply(ctx *fasthttp.RequestCtx, code int, cluster, reason, msg string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set(ErrorHeader, reason)
	if reason == reasonOverflow {
		ctx.Response.Header.Set(overflowHeader, "true")
	}
	ctx.Response.Header.Set("Via", viaValue)
	b := make([]byte, 0, 128+len(msg))
	b = append(b, `{"error":{"code":"`...)
	b = append(b, errorCode(code)...)
	b = append(b, `","message":`...)
	b = strconv.AppendQuote(b, "gateway: "+msg)
	b = append(b, `,"reason":"`...)
	b = append(b, reason...)
	b = append(b, `","cluster":`...)
	b = strconv.AppendQuote(b, cluster)
	b = append(b, "}}\n"...)
	ctx.SetBody(b)
}

func errorCode(status int) string {
	switch status {
	case 400:
		return "invalid_argument"
	case 404:
		return "not_found"
	case 408:
		return "deadline_exceeded"
	case 413:
		return "payload_too_large"
	case 431, 505:
		return "invalid_argument"
	case 503:
		return "unavailable"
	case 504:
		return "deadline_exceeded"
	}
	return "bad_gateway"
}

// overlaySubset parses "k=v,k2=v2" over the route's metadata.
func overlaySubset(md map[string]string, hv []byte) (map[string]string, string, error) {
	out := make(map[string]string, len(md)+2)
	for k, v := range md {
		out[k] = v
	}
	var seen []string // the header's keys: one value each
	for _, pair := range bytes.Split(hv, []byte{','}) {
		pair = bytes.TrimSpace(pair)
		if len(pair) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(pair, []byte{'='})
		k, v = bytes.TrimSpace(k), bytes.TrimSpace(v)
		if !ok || len(k) == 0 {
			return nil, "", errors.New(SubsetHeader + ": want key=value[,key=value], got " + strconv.Quote(string(hv)))
		}
		if slices.Contains(seen, string(k)) {
			return nil, "", errors.New(SubsetHeader + ": key " + strconv.Quote(string(k)) + " given twice")
		}
		seen = append(seen, string(k))
		out[string(k)] = string(v)
	}
	return out, mdKey(out), nil
}

// originForm rewrites an absolute-form request target (GET http://a/b,
// as sent to a forward proxy) to origin form: its authority becomes the
// Host (RFC 9112 3.2.2: it replaces any Host header) and the rest the
// target, so that routing and forwarding see what they see for /b.
func originForm(h *fasthttp.RequestHeader) error {
	u := h.RequestURI()
	var rest []byte
	for _, scheme := range []string{"http://", "https://"} {
		if len(u) >= len(scheme) && strings.EqualFold(string(u[:len(scheme)]), scheme) {
			rest = u[len(scheme):]
			break
		}
	}
	if rest == nil {
		return fmt.Errorf("request target %q is neither a path nor an http(s) URL", u)
	}
	end := bytes.IndexAny(rest, "/?")
	authority, target := rest, []byte("/")
	if end >= 0 {
		authority = rest[:end]
		if rest[end] == '/' {
			target = rest[end:]
		} else {
			target = append([]byte("/"), rest[end:]...)
		}
	}
	if len(authority) == 0 || bytes.IndexByte(authority, '@') >= 0 {
		return fmt.Errorf("request target %q has no host, or has user information", u)
	}
	authority = append([]byte(nil), authority...)
	target = append([]byte(nil), target...)
	h.SetHostBytes(authority)
	h.SetRequestURIBytes(target)
	return nil
}

// lower appends s, its ASCII letters lower-cased, to dst (a new slice
// when s does not fit dst's capacity).
func lower(dst, s []byte) []byte {
	if len(s) > cap(dst) {
		return bytes.ToLower(s)
	}
	i := 0
	for i < len(s) && (s[i] < 'A' || s[i] > 'Z') {
		i++
	}
	dst = append(dst, s[:i]...) // most hosts are lower case: one copy
	for _, c := range s[i:] {
		if c >= 'A' && c <= 'Z' {
			c += 32
		}
		dst = append(dst, c)
	}
	return dst
}

// redirect answers a route's redirect action with its Location.
func redirect(ctx *fasthttp.RequestCtx, rd *redirectSpec, matched string, host []byte) {
	uri := ctx.Request.Header.RequestURI()
	path, query := uri, []byte(nil)
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		path, query = uri[:i], uri[i:]
	}
	scheme := rd.scheme
	if scheme == "" {
		scheme = "http"
	}
	h := string(host)
	if rd.host != "" {
		h = rd.host
	}
	if rd.port != 0 {
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		h = net.JoinHostPort(h, strconv.Itoa(int(rd.port)))
	} else if rd.requestPort {
		h = withRequestPort(h, host)
	} else if rd.host != "" || rd.scheme == "https" {
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh // a new host or scheme drops the old port
		}
	}
	p := string(path)
	switch {
	case rd.path != "":
		p = rd.path
	case rd.prefix != "":
		p = rd.prefix + p[min(len(matched), len(p)):]
	}
	loc := scheme + "://" + h + p
	if !rd.stripQuery && !strings.Contains(rd.path, "?") { // a query in path_redirect replaces the request's
		loc += string(query)
	}
	ctx.Response.Header.Set("Location", loc)
	ctx.SetStatusCode(rd.status)
}
