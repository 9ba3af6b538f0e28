package config

import (
	"regexp"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1"
)

// HTTPRoute rewrite: the path's matched prefix (or whole exact path), the
// authority, or the path by an RE2 regular expression, before the call
// goes to its destination.
func init() {
	allow(&networking.HTTPRoute{}, "rewrite")
	allow(&networking.HTTPRewrite{}, "uri", "authority", "uri_regex_rewrite")
	allow(&networking.RegexRewrite{}, "match", "rewrite")
}

func validateRewrite(c errs, path string, r *networking.HTTPRoute) {
	rw := r.Rewrite
	if rw.Uri == "" && rw.Authority == "" && rw.UriRegexRewrite == nil {
		c.add(path, ErrInvalid, "set uri, authority or uriRegexRewrite")
	}
	if rw.Uri != "" && rw.UriRegexRewrite != nil {
		c.add(join(path, "uri"), ErrInvalid, "set uri or uriRegexRewrite, not both")
	}
	if rw.Uri != "" {
		for i, m := range r.Match {
			if _, ok := m.GetUri().GetMatchType().(*networking.StringMatch_Regex); ok {
				c.add(join(path, "uri"), ErrInvalid, "match[%d] matches the uri by regex: there is no prefix to replace (use uriRegexRewrite)", i)
			}
		}
		if strings.ContainsAny(rw.Uri, " \t\r\n\x00") {
			c.add(join(path, "uri"), ErrInvalid, "%q holds white space or a control character", rw.Uri)
		}
	}
	if a := rw.Authority; a != "" && (strings.ContainsAny(a, " \t\r\n\x00/?#@") || strings.HasPrefix(a, ":")) {
		c.add(join(path, "authority"), ErrInvalid, "%q is not a host or host:port", a)
	}
	if rr := rw.UriRegexRewrite; rr != nil {
		p := join(path, "uriRegexRewrite")
		re, err := regexp.Compile(rr.Match)
		switch {
		case rr.Match == "":
			c.add(join(p, "match"), ErrInvalid, "required")
		case err != nil:
			c.add(join(p, "match"), ErrInvalid, "not an RE2 regular expression: %v", err)
		default:
			if n := maxGroupRef(rr.Rewrite); n > re.NumSubexp() {
				c.add(join(p, "rewrite"), ErrInvalid, `\%d: the match has %d capture groups`, n, re.NumSubexp())
			}
		}
		if strings.ContainsAny(rr.Rewrite, " \t\r\n\x00") {
			c.add(join(p, "rewrite"), ErrInvalid, "%q holds white space or a control character", rr.Rewrite)
		}
	}
}

// maxGroupRef is the highest capture group (\1 to \9, Envoy's form) that
// a regex rewrite's substitution names.
func maxGroupRef(s string) int {
	n := 0
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '\\' && s[i+1] >= '0' && s[i+1] <= '9' {
			d, _ := strconv.Atoi(s[i+1 : i+2])
			n = max(n, d)
			i++
		}
	}
	return n
}
