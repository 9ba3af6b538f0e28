package config

import (
	"strings"

	networking "istio.io/api/networking/v1"
)

// HTTPRoute redirect: the gateway (or Envoy) answers with a redirect to a
// new path (or the matched prefix swapped), authority, port and scheme,
// calling no destination.
func init() {
	allow(&networking.HTTPRoute{}, "redirect")
	allow(&networking.HTTPRedirect{}, "uri", "authority", "port", "derive_port", "scheme", "redirect_code", "prefix_rewrite")
}

// redirectCodes are the codes Istio (and Envoy's RedirectAction) can give.
var redirectCodes = map[uint32]bool{0: true, 301: true, 302: true, 303: true, 307: true, 308: true}

func validateRedirect(c errs, path string, r *networking.HTTPRoute) {
	rd := r.Redirect
	if len(r.Route) > 0 {
		c.add(path, ErrInvalid, "may not be set with route: a route either redirects or calls destinations")
	}
	if r.DirectResponse != nil {
		c.add(path, ErrInvalid, "may not be set with directResponse")
	}
	if r.Rewrite != nil {
		c.add(path, ErrInvalid, "may not be set with rewrite")
	}
	if !redirectCodes[rd.RedirectCode] {
		c.add(join(path, "redirectCode"), ErrInvalid, "%d: want 301, 302, 303, 307 or 308", rd.RedirectCode)
	}
	if rd.Uri != "" && rd.PrefixRewrite != "" {
		c.add(join(path, "prefixRewrite"), ErrInvalid, "set uri or prefixRewrite, not both")
	}
	if rd.PrefixRewrite != "" {
		for i, m := range r.Match {
			if _, ok := m.GetUri().GetMatchType().(*networking.StringMatch_Prefix); !ok && m.GetUri() != nil {
				c.add(join(path, "prefixRewrite"), ErrInvalid, "match[%d] does not match the uri by prefix: there is no prefix to replace", i)
			}
		}
	}
	for _, f := range []struct{ name, v string }{{"uri", rd.Uri}, {"prefixRewrite", rd.PrefixRewrite}} {
		if f.v != "" && (!strings.HasPrefix(f.v, "/") || strings.ContainsAny(f.v, " \t\r\n\x00#")) {
			c.add(join(path, f.name), ErrInvalid, "%q: want a path starting with /, without white space or fragment", f.v)
		}
	}
	if a := rd.Authority; a != "" && (strings.ContainsAny(a, " \t\r\n\x00/?#@") || strings.HasPrefix(a, ":")) {
		c.add(join(path, "authority"), ErrInvalid, "%q is not a host or host:port", a)
	}
	if p, ok := rd.RedirectPort.(*networking.HTTPRedirect_Port); ok && (p.Port == 0 || p.Port > 65535) {
		c.add(join(path, "port"), ErrInvalid, "%d not in [1, 65535]", p.Port)
	}
	if s := rd.Scheme; s != "" && s != "http" && s != "https" {
		c.add(join(path, "scheme"), ErrInvalid, "%q: want http or https", s)
	}
}
