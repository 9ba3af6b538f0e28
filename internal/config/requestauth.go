package config

import (
	"net/url"
	"slices"
	"strings"
	"time"

	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/jwt"
)

// RequestAuthentication: end-user authentication by JWT. A policy lists the
// issuers whose tokens the workloads it selects accept; a request with a
// token none of them verifies is refused (401), one without a token passes,
// and AuthorizationPolicies decide what its principal (iss/sub) and claims
// may do (requestPrincipals, request.auth.* conditions).

// The request.auth attributes an AuthorizationPolicy's when[].key may name.
const (
	CondRequestPrincipal = "request.auth.principal" // "iss/sub" of the request's token
	CondRequestAudiences = "request.auth.audiences" // its aud claim
	CondRequestPresenter = "request.auth.presenters"
	CondRequestClaims    = "request.auth.claims" // request.auth.claims[NAME] or [A][B] (nested)
)

// ClaimPath reads the claim name ConditionKey returned for
// request.auth.claims[A][B]: the path of nested claims, ["A", "B"].
func ClaimPath(name string) []string { return strings.Split(name, "][") }

// claimKey reads the bracketed claim names of a request.auth.claims key.
func claimKey(rest string) (string, bool) {
	if !strings.HasSuffix(rest, "]") {
		return "", false
	}
	name := strings.TrimSuffix(rest, "]")
	for _, seg := range ClaimPath(name) {
		if seg == "" || strings.ContainsAny(seg, "[]") {
			return "", false
		}
	}
	return name, true
}

func validateRequestAuthentication(c errs, path string, o *Object) {
	ra := o.RequestAuthentication
	validateSelector(c, join(path, "selector.matchLabels"), ra.GetSelector().GetMatchLabels())
	issuers := map[string]int{}
	for i, r := range ra.JwtRules {
		p := index(join(path, "jwtRules"), i)
		if r == nil {
			c.add(p, ErrInvalid, "want an object, got null")
			continue
		}
		if r.Issuer == "" {
			c.add(join(p, "issuer"), ErrInvalid, "required: the token's iss claim")
		} else if j, dup := issuers[r.Issuer]; dup {
			c.add(join(p, "issuer"), ErrInvalid, "%q: already the issuer of jwtRules[%d] (one rule per issuer, as Istio)", r.Issuer, j)
		} else {
			issuers[r.Issuer] = i
		}
		for j, a := range r.Audiences {
			if a == "" {
				c.add(index(join(p, "audiences"), j), ErrInvalid, "must not be empty")
			}
		}
		switch {
		case r.JwksUri != "" && r.Jwks != "":
			c.add(join(p, "jwks"), ErrInvalid, "only one of jwksUri and jwks may be set")
		case r.JwksUri != "":
			u, err := url.Parse(r.JwksUri)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				c.add(join(p, "jwksUri"), ErrInvalid, "%q: want an http:// or https:// URL", r.JwksUri)
			}
		case r.Jwks != "":
			if _, err := jwt.ParseKeySet([]byte(r.Jwks)); err != nil {
				c.add(join(p, "jwks"), ErrInvalid, "%v", err)
			}
		default:
			c.add(join(p, "jwksUri"), ErrInvalid, "required: jwksUri or jwks (Sextant does not discover keys through OpenID metadata)")
		}
		for j, h := range r.FromHeaders {
			hp := index(join(p, "fromHeaders"), j)
			if h == nil || h.Name == "" {
				c.add(join(hp, "name"), ErrInvalid, "required")
				continue
			}
			if !validHeaderName(h.Name) {
				c.add(join(hp, "name"), ErrInvalid, "%q: not an HTTP header name", h.Name)
			}
		}
		for j, q := range r.FromParams {
			if q == "" {
				c.add(index(join(p, "fromParams"), j), ErrInvalid, "must not be empty")
			}
		}
		for j, k := range r.FromCookies {
			if k == "" || strings.ContainsAny(k, " ;=,\t") {
				c.add(index(join(p, "fromCookies"), j), ErrInvalid, "%q: not a cookie name", k)
			}
		}
		if h := r.OutputPayloadToHeader; h != "" && !validHeaderName(h) {
			c.add(join(p, "outputPayloadToHeader"), ErrInvalid, "%q: not an HTTP header name", h)
		}
		for j, ch := range r.OutputClaimToHeaders {
			cp := index(join(p, "outputClaimToHeaders"), j)
			if ch == nil {
				c.add(cp, ErrInvalid, "want an object, got null")
				continue
			}
			if !validHeaderName(ch.Header) {
				c.add(join(cp, "header"), ErrInvalid, "%q: want an HTTP header name", ch.Header)
			}
			if ch.Claim == "" {
				c.add(join(cp, "claim"), ErrInvalid, "required")
			}
		}
		if d := r.Timeout; d != nil {
			if t := d.AsDuration(); t <= 0 || t > time.Minute {
				c.add(join(p, "timeout"), ErrInvalid, "%v: want a duration above 0 and at most 1m (the JWKS fetch's)", t)
			}
		}
	}
}

// RequestAuthentications returns the RequestAuthentications that apply to
// w, in key order: as Istio, every policy selecting w applies (its own,
// its namespace's, the mesh's), their JWT rules together.
func (s *Security) RequestAuthentications(w Workload) []*Object {
	var out []*Object
	for _, o := range s.reqAuthn {
		if s.selects(o.Namespace, o.RequestAuthentication.GetSelector().GetMatchLabels(), w) {
			out = append(out, o)
		}
	}
	return out
}

// JWTRules are the JWT rules of RequestAuthentications objs, one per
// issuer (the first by key wins, as Istio keeps one provider per issuer).
func JWTRules(objs []*Object) []*security.JWTRule {
	var out []*security.JWTRule
	for _, o := range objs {
		for _, r := range o.RequestAuthentication.GetJwtRules() {
			if !slices.ContainsFunc(out, func(x *security.JWTRule) bool { return x.Issuer == r.Issuer }) {
				out = append(out, r)
			}
		}
	}
	return out
}
