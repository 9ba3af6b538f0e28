package gateway

import (
	"bytes"
	"fmt"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	"github.com/valyala/fasthttp"
)

const (
	corsFilterName = "envoy.filters.http.cors"
	corsTypeURL    = "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy"
)

// corsFilter is Envoy's CORS filter on one route: it answers a preflight
// from an allowed origin itself, and adds the allow headers to the answer
// of an actual request from one.
type corsFilter struct {
	origins []headerMatch
	// anyOrigin: one of origins matches "*", which allows any (as Envoy
	// reads it); known at decode, not matched again each call.
	anyOrigin                bool
	methods, headers, maxAge []byte
	expose                   []byte
	credentials              bool
	forwardUnmatched         bool // forward_not_matching_preflights (default true)
}

// The CORS filter's headers, built once.
var (
	corsOrigin           = []byte(fasthttp.HeaderOrigin) // canonical: as the server keeps it
	corsRequestMethod    = []byte(fasthttp.HeaderAccessControlRequestMethod)
	corsAllowOrigin      = newHeaderName(fasthttp.HeaderAccessControlAllowOrigin)
	corsAllowCredentials = newHeaderName(fasthttp.HeaderAccessControlAllowCredentials)
	corsAllowMethods     = newHeaderName(fasthttp.HeaderAccessControlAllowMethods)
	corsAllowHeaders     = newHeaderName(fasthttp.HeaderAccessControlAllowHeaders)
	corsMaxAge           = newHeaderName(fasthttp.HeaderAccessControlMaxAge)
	corsExposeHeaders    = newHeaderName(fasthttp.HeaderAccessControlExposeHeaders)
	corsTrue             = []byte("true")
)

// buildCORSFilter reads the route's
// typed_per_filter_config["envoy.filters.http.cors"], a CorsPolicy (or a
// FilterConfig wrapping one, as Sextant's control plane sends it so that
// grpc-go may skip it).
func buildCORSFilter(r *route.Route, path string) (httpFilter, error) {
	a := r.GetTypedPerFilterConfig()[corsFilterName]
	if a == nil {
		return nil, nil
	}
	p := path + `.typed_per_filter_config["` + corsFilterName + `"]`
	if a.GetTypeUrl() == filterConfigURL {
		fc := new(route.FilterConfig)
		if err := a.UnmarshalTo(fc); err != nil {
			return nil, fieldErr(p, "%v", err)
		}
		if fc.GetDisabled() || fc.GetConfig() == nil {
			return nil, nil
		}
		a, p = fc.GetConfig(), p+".config"
	}
	if a.GetTypeUrl() != corsTypeURL {
		return nil, fieldErr(p, "type %q: the CORS filter needs %q", a.GetTypeUrl(), corsTypeURL)
	}
	cfg := new(corsv3.CorsPolicy)
	if err := a.UnmarshalTo(cfg); err != nil {
		return nil, fieldErr(p, "%v", err)
	}
	if cfg.GetFilterEnabled() != nil && cfg.GetFilterEnabled().GetDefaultValue().GetNumerator() == 0 {
		return nil, nil // 0%: off
	}
	f := &corsFilter{methods: []byte(cfg.GetAllowMethods()), headers: []byte(cfg.GetAllowHeaders()), maxAge: []byte(cfg.GetMaxAge()),
		expose: []byte(cfg.GetExposeHeaders()), credentials: cfg.GetAllowCredentials().GetValue(), forwardUnmatched: true}
	if v := cfg.GetForwardNotMatchingPreflights(); v != nil {
		f.forwardUnmatched = v.GetValue()
	}
	for i, sm := range cfg.GetAllowOriginStringMatch() {
		hm, err := decodeStringMatcher(sm, fmt.Sprintf("%s.allow_origin_string_match[%d]", p, i))
		if err != nil {
			return nil, err
		}
		f.origins = append(f.origins, hm)
		f.anyOrigin = f.anyOrigin || matchString(&hm, []byte("*"))
	}
	for _, v := range []struct {
		name string
		v    []byte
	}{{"allow_methods", f.methods}, {"allow_headers", f.headers},
		{"expose_headers", f.expose}, {"max_age", f.maxAge}} {
		if bytes.ContainsAny(v.v, "\r\n\x00") {
			return nil, fieldErr(p+"."+v.name, "control characters in %q", v.v)
		}
	}
	return f, nil
}

// allowed reports whether origin is one of the policy's (an exact "*"
// allows any, as Envoy reads it).
func (f *corsFilter) allowed(origin []byte) bool {
	if f.anyOrigin {
		return true
	}
	for i := range f.origins {
		if matchString(&f.origins[i], origin) {
			return true
		}
	}
	return false
}

func (f *corsFilter) request(ctx *fasthttp.RequestCtx, _ int) bool {
	h := &ctx.Request.Header
	if !h.IsOptions() {
		return false // not a preflight: the answer gets its headers in response
	}
	origin := h.PeekCanonical(corsOrigin)
	if len(origin) == 0 || len(h.PeekCanonical(corsRequestMethod)) == 0 {
		return false
	}
	if !f.allowed(origin) {
		if f.forwardUnmatched {
			return false
		}
		ctx.SetStatusCode(fasthttp.StatusOK) // answered, without any allow header
		return true
	}
	// The gateway's own answer: its names are canonical.
	rh := &ctx.Response.Header
	ctx.SetStatusCode(fasthttp.StatusOK)
	rh.SetCanonical(corsAllowOrigin.canon, origin)
	if f.credentials {
		rh.SetCanonical(corsAllowCredentials.canon, corsTrue)
	}
	if len(f.methods) > 0 {
		rh.SetCanonical(corsAllowMethods.canon, f.methods)
	}
	if len(f.headers) > 0 {
		rh.SetCanonical(corsAllowHeaders.canon, f.headers)
	}
	if len(f.maxAge) > 0 {
		rh.SetCanonical(corsMaxAge.canon, f.maxAge)
	}
	return true
}

func (f *corsFilter) response(ctx *fasthttp.RequestCtx, h responseHeader, _ int) {
	origin := ctx.Request.Header.PeekCanonical(corsOrigin)
	if len(origin) == 0 || !f.allowed(origin) {
		return
	}
	h.set(&corsAllowOrigin, origin) // the request's own bytes: set copies them
	if f.credentials {
		h.set(&corsAllowCredentials, corsTrue)
	}
	if len(f.expose) > 0 {
		h.set(&corsExposeHeaders, f.expose)
	}
}
