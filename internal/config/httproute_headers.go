package config

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"
)

// HTTPRoute headers, on the route and per destination: request and
// response headers set, added and removed.
func init() {
	allow(&networking.HTTPRoute{}, "headers")
	allow(&networking.HTTPRouteDestination{}, "headers")
	allow(&networking.Headers{}, "request", "response")
	allow(&networking.Headers_HeaderOperations{}, "set", "add", "remove")
}

func validateHeaders(c errs, path string, h *networking.Headers) {
	validateHeaderOps(c, join(path, "request"), h.Request)
	validateHeaderOps(c, join(path, "response"), h.Response)
}

func validateHeaderOps(c errs, path string, o *networking.Headers_HeaderOperations) {
	if o == nil {
		return
	}
	for _, op := range []struct {
		name string
		m    map[string]string
	}{{"set", o.Set}, {"add", o.Add}} {
		names := make([]string, 0, len(op.m))
		for n := range op.m {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			p := mapKey(join(path, op.name), n)
			validateHeaderOpName(c, p, n)
			if v := op.m[n]; strings.ContainsAny(v, "\r\n\x00") {
				c.add(p, ErrInvalid, "the value holds a line break or NUL")
			} else if strings.Contains(v, "%") {
				c.add(p, ErrInvalid, "%q: Envoy's %%VARIABLE%% substitution is not supported (the gateway sends values as written)", v)
			}
		}
	}
	for i, n := range o.Remove {
		validateHeaderOpName(c, index(join(path, "remove"), i), n)
	}
}

func validateHeaderOpName(c errs, path, n string) {
	switch {
	case strings.HasPrefix(n, ":"):
		c.add(path, ErrInvalid, "%q: pseudo-headers cannot be changed", n)
	case strings.EqualFold(n, "host"):
		c.add(path, ErrInvalid, "%q: the Host header cannot be changed", n)
	case !validHeaderName(n):
		c.add(path, ErrInvalid, "%q is not a header name", n)
	}
}
