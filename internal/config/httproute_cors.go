//lint:file-ignore SA1019 Istio's deprecated corsPolicy.allowOrigin is still written in configs; it is read as Istio reads it.

package config

import (
	networking "istio.io/api/networking/v1"
)

// HTTPRoute corsPolicy: the gateway (or Envoy's CORS filter) answers a
// preflight from an allowed origin itself and adds the allow headers to
// the answers of actual requests from one.
func init() {
	allow(&networking.HTTPRoute{}, "cors_policy")
	allow(&networking.CorsPolicy{}, "allow_origin", "allow_origins", "allow_methods", "allow_headers", "expose_headers",
		"max_age", "allow_credentials", "unmatched_preflights")
}

func validateCORS(c errs, path string, p *networking.CorsPolicy) {
	for i, sm := range p.AllowOrigins {
		if sm == nil {
			c.add(index(join(path, "allowOrigins"), i), ErrInvalid, "one of exact, prefix or regex is required")
			continue
		}
		validateStringMatch(c, index(join(path, "allowOrigins"), i), sm, false)
	}
	for i, o := range p.AllowOrigin {
		if o == "" {
			c.add(index(join(path, "allowOrigin"), i), ErrInvalid, "empty")
		}
	}
	for i, m := range p.AllowMethods {
		if !methods[m] {
			c.add(index(join(path, "allowMethods"), i), ErrInvalid, "%q is not an HTTP method (upper case, e.g. GET)", m)
		}
	}
	for _, hs := range []struct {
		name  string
		names []string
	}{{"allowHeaders", p.AllowHeaders}, {"exposeHeaders", p.ExposeHeaders}} {
		for i, n := range hs.names {
			if n != "*" && !validHeaderName(n) {
				c.add(index(join(path, hs.name), i), ErrInvalid, "%q is not a header name", n)
			}
		}
	}
	if p.MaxAge != nil {
		validateDuration(c, join(path, "maxAge"), p.MaxAge, false)
		if p.MaxAge.AsDuration() < 0 {
			c.add(join(path, "maxAge"), ErrInvalid, "must not be negative")
		}
	}
}
