package gateway

import (
	"fmt"
	"strings"

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
	origins                  []headerMatch
	methods, headers, maxAge string
	expose                   string
	credentials              bool
	forwardUnmatched         bool // forward_not_matching_preflights (default true)
}

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
	f := &corsFilter{methods: cfg.GetAllowMethods(), headers: cfg.GetAllowHeaders(), maxAge: cfg.GetMaxAge(),
		expose: cfg.GetExposeHeaders(), credentials: cfg.GetAllowCredentials().GetValue(), forwardUnmatched: true}
	if v := cfg.GetForwardNotMatchingPreflights(); v != nil {
		f.forwardUnmatched = v.GetValue()
	}
	for i, sm := range cfg.GetAllowOriginStringMatch() {
		hm, err := decodeStringMatcher(sm, fmt.Sprintf("%s.allow_origin_string_match[%d]", p, i))
		if err != nil {
			return nil, err
		}
		f.origins = append(f.origins, hm)
	}
	for _, v := range []struct{ name, v string }{{"allow_methods", f.methods}, {"allow_headers", f.headers},
		{"expose_headers", f.expose}, {"max_age", f.maxAge}} {
		if strings.ContainsAny(v.v, "\r\n\x00") {
			return nil, fieldErr(p+"."+v.name, "control characters in %q", v.v)
		}
	}
	return f, nil
}

// allowed reports whether origin is one of the policy's (an exact "*"
// allows any, as Envoy reads it).
func (f *corsFilter) allowed(origin []byte) bool {
	_, ok := f.match(origin)
	return ok
}

// match reports whether origin is allowed, with it as a string: the
// matcher's own for an exact match (no allocation on the common path).
func (f *corsFilter) match(origin []byte) (string, bool) {
	for i := range f.origins {
		hm := &f.origins[i]
		if hm.kind == strExact && !hm.ignoreCase && string(origin) == hm.value {
			return hm.value, true
		}
		if matchString(hm, origin) || matchString(hm, []byte("*")) {
			return string(origin), true
		}
	}
	return "", false
}

func (f *corsFilter) request(ctx *fasthttp.RequestCtx, _ int) bool {
	h := &ctx.Request.Header
	origin := h.Peek("Origin")
	if len(origin) == 0 || !h.IsOptions() || len(h.Peek("Access-Control-Request-Method")) == 0 {
		return false // not a preflight: the answer gets its headers in response
	}
	if !f.allowed(origin) {
		if f.forwardUnmatched {
			return false
		}
		ctx.SetStatusCode(fasthttp.StatusOK) // answered, without any allow header
		return true
	}
	rh := &ctx.Response.Header
	ctx.SetStatusCode(fasthttp.StatusOK)
	rh.SetBytesV("Access-Control-Allow-Origin", origin)
	if f.credentials {
		rh.Set("Access-Control-Allow-Credentials", "true")
	}
	if f.methods != "" {
		rh.Set("Access-Control-Allow-Methods", f.methods)
	}
	if f.headers != "" {
		rh.Set("Access-Control-Allow-Headers", f.headers)
	}
	if f.maxAge != "" {
		rh.Set("Access-Control-Max-Age", f.maxAge)
	}
	return true
}

func (f *corsFilter) response(ctx *fasthttp.RequestCtx, h responseHeader, _ int) {
	raw := ctx.Request.Header.Peek("Origin")
	if len(raw) == 0 {
		return
	}
	origin, ok := f.match(raw)
	if !ok {
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	if f.credentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	if f.expose != "" {
		h.Set("Access-Control-Expose-Headers", f.expose)
	}
}
