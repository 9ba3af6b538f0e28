package gateway

import (
	"bytes"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2/hpack"
)

// httpFilter is one per-route behaviour of the gateway's HTTP filter chain
// (Envoy's HTTP filters, Caddy's handler modules): fault injection, header
// changes, and those to come (CORS, rewrite, mirror...). Each is built once
// per route from the route's xDS config (routeFilterBuilders) and runs on
// every call of the route; a route without any has a nil chain and pays
// nothing.
type httpFilter interface {
	// request runs once the route and its destination (dest, the index of
	// the route's weighted cluster; -1 for a direct response) are chosen,
	// before the upstream call. It may change the request in place, or
	// answer it itself: it sets ctx.Response and returns true, which ends
	// the chain and the call.
	request(ctx *fasthttp.RequestCtx, dest int) (answered bool)
	// response runs on the header of the upstream's answer (or of the
	// route's direct response) before it goes downstream; ctx is the call's
	// (its request as the filters left it).
	response(ctx *fasthttp.RequestCtx, h responseHeader, dest int)
}

// headerName is a header name a filter sets, adds or removes, built once
// per route: a call then pays no re-casing of it (fasthttp copies a name
// given by string and re-cases it on each Set, Add, Del or Peek: most of
// the header filter's cost in the profile, docs/perf/gateway.md).
type headerName struct {
	name  string // as configured
	raw   []byte // name, for fasthttp's byte calls
	canon []byte // fasthttp's canonical form: how the gateway's server keeps a request's names
	std   string // net/http's canonical form: an http.Header's key
	lower string // HTTP/2's form: an HTTP/2 field's name
}

func newHeaderName(name string) headerName {
	return headerName{name: name, raw: []byte(name), canon: fasthttp.AppendNormalizedHeaderKey(nil, name),
		std: textproto.CanonicalMIMEHeaderKey(name), lower: strings.ToLower(name)}
}

// responseHeader is what a filter may do to a header: an answer's,
// fastHeader (HTTP/1.1) or stdHeader (HTTP/2 upstreams), and a request's,
// reqHeader. Values are copied.
type responseHeader interface {
	set(n *headerName, value []byte) // replaces the value (a request's: the first of repeated ones, as fasthttp's Set)
	add(n *headerName, value []byte) // one more value
	del(n *headerName)
	has(n *headerName) bool
}

// reqHeader is a request's fasthttp header as a responseHeader. The
// gateway's server (and its HTTP/2 side, by Add) keeps a request's names
// canonical, so they are given so: Set's and Peek's work without the
// re-casing.
type reqHeader struct{ h *fasthttp.RequestHeader }

func (r reqHeader) set(n *headerName, v []byte) { r.h.SetCanonical(n.canon, v) }
func (r reqHeader) add(n *headerName, v []byte) { r.h.AddBytesKV(n.canon, v) }
func (r reqHeader) del(n *headerName)           { r.h.Del(n.name) }
func (r reqHeader) has(n *headerName) bool      { return r.h.PeekCanonical(n.canon) != nil }

// fastHeader is an answer's fasthttp header as a responseHeader, made by
// answerHeader: names are kept as given, an upstream's as it sent them
// (upstream.go reads them so) and a filter's as configured, whatever
// protocol the upstream spoke; they match in any case, as HTTP's do.
type fastHeader struct{ h *fasthttp.ResponseHeader }

// answerHeader is h for the filters' answer hooks. Its names no longer
// normalized, one the filter adds where the answer has none is put in as
// it is, without fasthttp's copying and checking of it (a third of the
// hooks' time).
func answerHeader(h *fasthttp.ResponseHeader) fastHeader {
	h.DisableNormalizing()
	return fastHeader{h}
}

func (f fastHeader) add(n *headerName, v []byte) {
	if f.has(n) {
		f.h.AddBytesKV(n.raw, v)
		return
	}
	f.h.SetCanonical(n.raw, v) // as given: none to keep, nothing to re-case
}

func (f fastHeader) set(n *headerName, v []byte) {
	f.del(n)
	f.h.SetCanonical(n.raw, v)
}

func (f fastHeader) del(n *headerName) {
	for {
		k, ok := f.find(n)
		if !ok {
			return
		}
		var buf [64]byte
		f.h.DelBytes(append(buf[:0], k...)) // k is the header's own storage
	}
}

func (f fastHeader) has(n *headerName) bool {
	_, ok := f.find(n)
	return ok
}

// find is the answer's name of header n, in whatever case it has it.
// (The length first: strings.EqualFold on string(k) copied each name it
// compared, 20% of the filters' time.)
func (f fastHeader) find(n *headerName) ([]byte, bool) {
	for k := range f.h.All() {
		if len(k) == len(n.raw) && bytes.EqualFold(k, n.raw) {
			return k, true
		}
	}
	return nil, false
}

// stdHeader is an answer's net/http header as a responseHeader, by the
// names' net/http forms built with them (what http.Header's methods would
// compute each call).
type stdHeader http.Header

func (h stdHeader) set(n *headerName, v []byte) { h[n.std] = []string{string(v)} }
func (h stdHeader) add(n *headerName, v []byte) { h[n.std] = append(h[n.std], string(v)) }
func (h stdHeader) del(n *headerName)           { delete(h, n.std) }
func (h stdHeader) has(n *headerName) bool      { return len(h[n.std]) > 0 }

// fieldHeader is an HTTP/2 endpoint's answer as a responseHeader: its
// fields, by their lower-case names (HTTP/2's), edited in place.
type fieldHeader struct{ fs *[]hpack.HeaderField }

func (h fieldHeader) set(n *headerName, v []byte) { h.del(n); h.add(n, v) }
func (h fieldHeader) add(n *headerName, v []byte) {
	*h.fs = append(*h.fs, hpack.HeaderField{Name: n.lower, Value: string(v)})
}
func (h fieldHeader) del(n *headerName) {
	*h.fs = slices.DeleteFunc(*h.fs, func(f hpack.HeaderField) bool { return f.Name == n.lower })
}
func (h fieldHeader) has(n *headerName) bool {
	return slices.ContainsFunc(*h.fs, func(f hpack.HeaderField) bool { return f.Name == n.lower })
}

// filterChain is a route's filters in the order they run.
type filterChain []httpFilter

// request runs the chain's request hooks; true: a filter answered.
func (fc filterChain) request(ctx *fasthttp.RequestCtx, dest int) bool {
	for _, f := range fc {
		if f.request(ctx, dest) {
			return true
		}
	}
	return false
}

// response runs the chain's response hooks.
func (fc filterChain) response(ctx *fasthttp.RequestCtx, h responseHeader, dest int) {
	for _, f := range fc {
		f.response(ctx, h, dest)
	}
}

// filterBuilder builds one filter of a route from its xDS Route (nil: the
// route does not use it), or says what in the config is wrong (path names
// the route, for the error).
type filterBuilder func(r *route.Route, path string) (httpFilter, error)

// routeFilterBuilders are the chain's filters, in Envoy's order: CORS
// first (Istio lists it before fault), the fault filter before the router,
// which rewrites and changes headers.
var routeFilterBuilders = []filterBuilder{buildCORSFilter, buildFaultFilter, buildRewriteFilter, buildHeadersFilter}

// buildFilters builds a route's filter chain; nil when it uses none.
func buildFilters(r *route.Route, path string) (filterChain, error) {
	var fc filterChain
	for _, b := range routeFilterBuilders {
		f, err := b(r, path)
		if err != nil {
			return nil, err
		}
		if f != nil {
			fc = append(fc, f)
		}
	}
	return fc, nil
}

// filterReasonKey is the RequestCtx user value by which a filter that
// answered a call names the reason its call record gives (fault_abort).
const filterReasonKey = "sextant.filter.reason"

// recordAnswered counts and records a call a filter of route r answered,
// as the call of its target dest (none without one: a direct response's
// route) with the reason the filter gave; timed from start, the call's (a
// fault's delay included).
func (g *Gateway) recordAnswered(ctx *fasthttp.RequestCtx, r *routeRT, dest int, start time.Time) {
	reason, _ := ctx.UserValue(filterReasonKey).(string)
	if dest < 0 || r.targets[dest].cluster == nil || reason == "" {
		return
	}
	tg := &r.targets[dest]
	status := ctx.Response.StatusCode()
	k := call{c: tg.cluster, status: status, reason: reason, grpc: parseGRPCStatus(string(ctx.Response.Header.Peek("Grpc-Status"))),
		detail: rbacShadow(ctx)}
	lat := time.Since(start)
	k.c.m.observe(status, lat)
	if g.rec != nil {
		k.src = sourceOf(ctx)
		g.recordCall(&k, r, tg.mdKey, start, lat, int64(len(ctx.Response.Body())))
	}
}
