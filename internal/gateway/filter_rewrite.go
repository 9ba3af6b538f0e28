package gateway

import (
	"bytes"
	"regexp"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/valyala/fasthttp"
)

// rewriteFilter changes a call's authority (host_rewrite_literal) and its
// path by a regular expression (regex_rewrite) before it goes upstream. A
// prefix_rewrite is prepareRequest's, which predates the chain.
type rewriteFilter struct {
	host string
	re   *regexp.Regexp // nil: no regex rewrite
	sub  []byte         // the substitution, in Go's $-template form
}

// buildRewriteFilter reads a route action's host_rewrite_literal and
// regex_rewrite; other host rewrites are refused by name.
func buildRewriteFilter(r *route.Route, path string) (httpFilter, error) {
	ra := r.GetRoute()
	if ra == nil {
		return nil, nil
	}
	p := path + ".route"
	f := &rewriteFilter{}
	switch h := ra.GetHostRewriteSpecifier().(type) {
	case nil:
	case *route.RouteAction_HostRewriteLiteral:
		if strings.ContainsAny(h.HostRewriteLiteral, " \t\r\n\x00/?#@") {
			return nil, fieldErr(p+".host_rewrite_literal", "%q is not a host or host:port", h.HostRewriteLiteral)
		}
		f.host = h.HostRewriteLiteral
	case *route.RouteAction_AutoHostRewrite:
		if h.AutoHostRewrite.GetValue() {
			return nil, fieldErr(p+".auto_host_rewrite", "%v (host_rewrite_literal)", errUnsupported)
		}
	default:
		return nil, fieldErr(p, "host rewrite %T: %v (host_rewrite_literal)", h, errUnsupported)
	}
	if rr := ra.GetRegexRewrite(); rr != nil {
		if ra.GetPrefixRewrite() != "" {
			return nil, fieldErr(p+".regex_rewrite", "set prefix_rewrite or regex_rewrite, not both")
		}
		expr := rr.GetPattern().GetRegex()
		if expr == "" || len(expr) > 1024 {
			return nil, fieldErr(p+".regex_rewrite.pattern.regex", "%d bytes, want 1 to 1024", len(expr))
		}
		re, err := regexp.Compile(expr) // RE2, as Envoy's
		if err != nil {
			return nil, fieldErr(p+".regex_rewrite.pattern.regex", "not an RE2 regular expression: %v", err)
		}
		f.re, f.sub = re, envoySubstitution(rr.GetSubstitution())
	}
	if f.host == "" && f.re == nil {
		return nil, nil
	}
	return f, nil
}

// envoySubstitution turns Envoy's substitution (\1 names a group, $ is
// literal) into Go's template form (${1}, $$).
func envoySubstitution(s string) []byte {
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '$':
			out = append(out, "$$"...)
		case c == '\\' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			out = append(out, "${"...)
			out = append(out, s[i+1], '}')
			i++
		default:
			out = append(out, c)
		}
	}
	return out
}

func (f *rewriteFilter) request(ctx *fasthttp.RequestCtx, _ int) bool {
	h := &ctx.Request.Header
	if f.host != "" {
		h.SetHost(f.host)
	}
	uri := h.RequestURI()
	if f.re != nil {
		// The path only: the query stays as sent (Envoy's regex_rewrite).
		p, q := uri, []byte(nil)
		if i := bytes.IndexByte(uri, '?'); i >= 0 {
			p, q = uri[:i], uri[i:]
		}
		uri = append(f.re.ReplaceAll(p, f.sub), q...)
	}
	// Set on the Request, which drops a URI parsed before (the call log's,
	// a query match's): fasthttp would write its host and path upstream.
	ctx.Request.SetRequestURIBytes(uri)
	return false
}

func (f *rewriteFilter) response(*fasthttp.RequestCtx, responseHeader, int) {}
