package gateway

import (
	"net/http"
	"strings"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/valyala/fasthttp"
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

// responseHeader is what a filter may do to a header: an answer's,
// fastHeader (HTTP/1.1) or stdHeader (HTTP/2 upstreams), and a request's,
// *fasthttp.RequestHeader. Peek is nil when the header is
// absent.
type responseHeader interface {
	Set(key, value string)
	Add(key, value string)
	Del(key string)
	Peek(key string) []byte
}

// fastHeader is an answer's fasthttp header as a responseHeader. An
// upstream's answer keeps its names as sent (upstream.go disables
// normalizing), so names match in any case, as HTTP's do.
type fastHeader struct{ h *fasthttp.ResponseHeader }

func (f fastHeader) Add(key, value string) { f.h.Add(key, value) }

func (f fastHeader) Set(key, value string) {
	f.Del(key)
	f.h.Add(key, value)
}

func (f fastHeader) Del(key string) {
	for {
		var found []byte
		for k := range f.h.All() {
			if strings.EqualFold(string(k), key) {
				found = append([]byte(nil), k...) // k is the header's own storage
				break
			}
		}
		if found == nil {
			return
		}
		f.h.DelBytes(found)
	}
}

func (f fastHeader) Peek(key string) []byte {
	for k, v := range f.h.All() {
		if strings.EqualFold(string(k), key) {
			return v
		}
	}
	return nil
}

// stdHeader is an answer's net/http header as a responseHeader.
type stdHeader http.Header

func (h stdHeader) Set(key, value string) { http.Header(h).Set(key, value) }
func (h stdHeader) Add(key, value string) { http.Header(h).Add(key, value) }
func (h stdHeader) Del(key string)        { http.Header(h).Del(key) }

func (h stdHeader) Peek(key string) []byte {
	if vs := http.Header(h).Values(key); len(vs) > 0 {
		return []byte(vs[0])
	}
	return nil
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
// route) with the reason the filter gave; from start, before the filters
// ran (a fault's delay included).
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
