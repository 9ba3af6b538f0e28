package gateway

// JWT authentication: Envoy's envoy.filters.http.jwt_authn, which Istio's
// RequestAuthentication becomes. It is compiled once per config (providers
// and the requirement tree) and runs per call before the RBAC filters: a
// token that fails the requirement is answered 401; a verified token's
// payload is what RBAC's metadata matchers read (request principals,
// request.auth.* conditions). Remote keys come from the JWKS cache
// (jwks.go), which never blocks a call: until keys arrive, tokens fail.

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	jwtpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/jwt"
)

const (
	jwtFilterName = "envoy.filters.http.jwt_authn"
	jwtTypeURL    = "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication"
	reasonJWT     = "jwt_authn_failed"
	// defaultClockSkew is Envoy's clock_skew_seconds default.
	defaultClockSkew = 60 * time.Second
	// defaultJWKSCache is Envoy's remote_jwks cache_duration default.
	defaultJWKSCache = 5 * time.Minute
)

// jwtAuthn is one compiled JwtAuthentication.
type jwtAuthn struct {
	providers           []*jwtProvider // by name
	rules               []jwtRule
	bypassCORSPreflight bool
}

type jwtRule struct {
	prefix, path string // the route match: a prefix, or an exact path
	req          *jwtReq
}

// jwtReq is a requirement: one of provider, any, all, allowMissing,
// allowMissingOrFailed.
type jwtReq struct {
	kind     uint8
	provider int // index into providers
	children []*jwtReq
}

const (
	reqProvider = iota
	reqAny
	reqAll
	reqAllowMissing
	reqAllowMissingOrFailed
)

type jwtProvider struct {
	name      string
	issuer    string
	audiences []string
	headers   []jwtHeader
	params    []string
	cookies   []string
	forward   bool
	payloadTo string // forward_payload_header
	metaKey   string // payload_in_metadata
	claims    []claimHeader
	skew      time.Duration
	local     *jwt.KeySet // inline keys, or
	remote    *jwksSource // fetched ones
	cache     tokenCache  // tokens it verified
}

// tokenCache keeps the tokens a provider verified, as Envoy's jwt_cache
// (100 by default): a client sends the same token on many calls, and its
// signature need not be verified again while it has not expired. Bounded;
// when full, an arbitrary entry makes room. Safe for calls' goroutines.
type tokenCache struct {
	mu sync.RWMutex
	m  map[string]*jwt.Token
}

const tokenCacheSize = 100

// get returns the verified token raw, if cached and still within its
// times at now (with skew).
func (c *tokenCache) get(raw []byte, now time.Time, skew time.Duration) *jwt.Token {
	c.mu.RLock()
	t := c.m[string(raw)] // no copy: a map lookup by a converted key does not allocate
	c.mu.RUnlock()
	if t == nil {
		return nil
	}
	sec, lw := now.Unix(), int64(skew/time.Second)
	if (t.Claims.Expiry != 0 && sec > t.Claims.Expiry+lw) || (t.Claims.NotBefore != 0 && sec+lw < t.Claims.NotBefore) {
		return nil
	}
	return t
}

func (c *tokenCache) put(raw string, t *jwt.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]*jwt.Token, tokenCacheSize)
	}
	if len(c.m) >= tokenCacheSize {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[raw] = t
}

type jwtHeader struct{ name, prefix string }

type claimHeader struct {
	header string
	path   []string // the claim, split at "."
}

// jwksSource is a remote JWKS: where, how long a fetch may take, how long
// its keys are used.
type jwksSource struct {
	uri     string
	timeout time.Duration
	cache   time.Duration
}

// remoteSources are the JWKS a filter list fetches (for the cache to
// prefetch and keep).
func remoteSources(fs []*rbacFilter) []*jwksSource {
	var out []*jwksSource
	for _, f := range fs {
		if f.jwt == nil {
			continue
		}
		for _, p := range f.jwt.providers {
			if p.remote != nil {
				out = append(out, p.remote)
			}
		}
	}
	return out
}

// compileJWTAuthn reads a JwtAuthentication; what the gateway cannot
// enforce is refused.
func compileJWTAuthn(cfg *jwtpb.JwtAuthentication, path string) (*jwtAuthn, error) {
	switch {
	case len(cfg.GetRequirementMap()) > 0:
		return nil, fieldErr(path+".requirement_map", "per-route requirements are %v by the gateway", errUnsupported)
	case cfg.GetFilterStateRules() != nil:
		return nil, fieldErr(path+".filter_state_rules", "%v by the gateway", errUnsupported)
	case cfg.GetStripFailureResponse():
		return nil, fieldErr(path+".strip_failure_response", "%v by the gateway", errUnsupported)
	}
	a := &jwtAuthn{bypassCORSPreflight: cfg.GetBypassCorsPreflight()}
	names := make([]string, 0, len(cfg.GetProviders()))
	for n := range cfg.GetProviders() {
		names = append(names, n)
	}
	sort.Strings(names)
	index := map[string]int{}
	for _, n := range names {
		p, err := compileJWTProvider(n, cfg.GetProviders()[n], fmt.Sprintf("%s.providers[%q]", path, n))
		if err != nil {
			return nil, err
		}
		index[n] = len(a.providers)
		a.providers = append(a.providers, p)
	}
	for i, r := range cfg.GetRules() {
		rp := fmt.Sprintf("%s.rules[%d]", path, i)
		var rule jwtRule
		m := r.GetMatch()
		switch {
		case m.GetPrefix() != "" || m.GetPath() != "":
			rule.prefix, rule.path = m.GetPrefix(), m.GetPath()
		default:
			return nil, fieldErr(rp+".match", "only prefix and path matches are supported by the gateway")
		}
		if len(m.GetHeaders()) > 0 || len(m.GetQueryParameters()) > 0 || m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue() {
			return nil, fieldErr(rp+".match", "headers, query_parameters and case_sensitive false are %v by the gateway", errUnsupported)
		}
		if r.GetRequirementName() != "" {
			return nil, fieldErr(rp+".requirement_name", "%v by the gateway (no requirement_map)", errUnsupported)
		}
		if r.GetRequires() != nil {
			req, err := compileJWTReq(r.GetRequires(), index, rp+".requires", 0)
			if err != nil {
				return nil, err
			}
			rule.req = req
		}
		a.rules = append(a.rules, rule)
	}
	return a, nil
}

func compileJWTProvider(name string, p *jwtpb.JwtProvider, path string) (*jwtProvider, error) {
	switch {
	case p.GetSubjects() != nil:
		return nil, fieldErr(path+".subjects", "%v by the gateway", errUnsupported)
	case p.GetMaxLifetime() != nil:
		return nil, fieldErr(path+".max_lifetime", "%v by the gateway", errUnsupported)
	case p.GetRequireExpiration():
		return nil, fieldErr(path+".require_expiration", "%v by the gateway", errUnsupported)
	case p.GetHeaderInMetadata() != "" || p.GetFailedStatusInMetadata() != "":
		return nil, fieldErr(path, "header_in_metadata and failed_status_in_metadata are %v by the gateway", errUnsupported)
	case p.GetNormalizePayloadInMetadata() != nil:
		return nil, fieldErr(path+".normalize_payload_in_metadata", "%v by the gateway", errUnsupported)
	}
	out := &jwtProvider{name: name, issuer: p.GetIssuer(), audiences: p.GetAudiences(), params: p.GetFromParams(), cookies: p.GetFromCookies(),
		forward: p.GetForward(), payloadTo: p.GetForwardPayloadHeader(), metaKey: p.GetPayloadInMetadata(), skew: defaultClockSkew}
	if s := p.GetClockSkewSeconds(); s != 0 {
		out.skew = time.Duration(s) * time.Second
	}
	for _, h := range p.GetFromHeaders() {
		out.headers = append(out.headers, jwtHeader{name: h.GetName(), prefix: h.GetValuePrefix()})
	}
	if len(out.headers)+len(out.params)+len(out.cookies) == 0 {
		// Envoy's defaults.
		out.headers = []jwtHeader{{name: "Authorization", prefix: "Bearer "}}
		out.params = []string{"access_token"}
	}
	for i, c := range p.GetClaimToHeaders() {
		if c.GetHeaderName() == "" || c.GetClaimName() == "" {
			return nil, fieldErr(fmt.Sprintf("%s.claim_to_headers[%d]", path, i), "header_name and claim_name are required")
		}
		out.claims = append(out.claims, claimHeader{header: c.GetHeaderName(), path: strings.Split(c.GetClaimName(), ".")})
	}
	switch src := p.GetJwksSourceSpecifier().(type) {
	case *jwtpb.JwtProvider_LocalJwks:
		var doc []byte
		switch {
		case src.LocalJwks.GetInlineString() != "":
			doc = []byte(src.LocalJwks.GetInlineString())
		case len(src.LocalJwks.GetInlineBytes()) > 0:
			doc = src.LocalJwks.GetInlineBytes()
		default:
			return nil, fieldErr(path+".local_jwks", "inline_string or inline_bytes: files and environment variables are %v by the gateway", errUnsupported)
		}
		ks, err := jwt.ParseKeySet(doc)
		if err != nil {
			return nil, fieldErr(path+".local_jwks", "%v", err)
		}
		out.local = ks
	case *jwtpb.JwtProvider_RemoteJwks:
		r := src.RemoteJwks
		uri := r.GetHttpUri().GetUri()
		if !strings.HasPrefix(uri, "http://") && !strings.HasPrefix(uri, "https://") {
			return nil, fieldErr(path+".remote_jwks.http_uri.uri", "%q: want an http:// or https:// URL", uri)
		}
		s := &jwksSource{uri: uri, timeout: 5 * time.Second, cache: defaultJWKSCache}
		if d := r.GetHttpUri().GetTimeout(); d != nil {
			t, err := duration(d, path+".remote_jwks.http_uri.timeout")
			if err != nil {
				return nil, err
			}
			if t > 0 {
				s.timeout = min(t, time.Minute)
			}
		}
		if d := r.GetCacheDuration(); d != nil {
			t, err := duration(d, path+".remote_jwks.cache_duration")
			if err != nil {
				return nil, err
			}
			if t > 0 {
				s.cache = max(t, time.Second)
			}
		}
		out.remote = s
	default:
		return nil, fieldErr(path, "remote_jwks or local_jwks is required")
	}
	return out, nil
}

const maxJWTReqDepth = 16

func compileJWTReq(r *jwtpb.JwtRequirement, index map[string]int, path string, depth int) (*jwtReq, error) {
	if depth > maxJWTReqDepth {
		return nil, fieldErr(path, "nested deeper than %d", maxJWTReqDepth)
	}
	list := func(rs []*jwtpb.JwtRequirement, field string) ([]*jwtReq, error) {
		if len(rs) < 2 {
			return nil, fieldErr(path+"."+field+".requirements", "want at least 2")
		}
		var out []*jwtReq
		for i, c := range rs {
			cr, err := compileJWTReq(c, index, fmt.Sprintf("%s.%s.requirements[%d]", path, field, i), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, cr)
		}
		return out, nil
	}
	switch t := r.GetRequiresType().(type) {
	case *jwtpb.JwtRequirement_ProviderName:
		i, ok := index[t.ProviderName]
		if !ok {
			return nil, fieldErr(path+".provider_name", "%q: no such provider", t.ProviderName)
		}
		return &jwtReq{kind: reqProvider, provider: i}, nil
	case *jwtpb.JwtRequirement_RequiresAny:
		cs, err := list(t.RequiresAny.GetRequirements(), "requires_any")
		return &jwtReq{kind: reqAny, children: cs}, err
	case *jwtpb.JwtRequirement_RequiresAll:
		cs, err := list(t.RequiresAll.GetRequirements(), "requires_all")
		return &jwtReq{kind: reqAll, children: cs}, err
	case *jwtpb.JwtRequirement_AllowMissing:
		return &jwtReq{kind: reqAllowMissing}, nil
	case *jwtpb.JwtRequirement_AllowMissingOrFailed:
		return &jwtReq{kind: reqAllowMissingOrFailed}, nil
	case nil:
		return nil, fieldErr(path, "requires_type is required")
	default:
		return nil, fieldErr(path, "%T is %v by the gateway", t, errUnsupported)
	}
}

// Enforcement.

// jwtResult is one provider's outcome for a call.
type jwtResult struct {
	state  uint8  // jwtMissing, jwtOK, jwtFailed
	raw    []byte // the token found (the request's bytes: read before apply changes them)
	err    error
	tok    *jwt.Token
	header string // the header the token came from ("": a param or cookie)
}

const (
	jwtMissing = iota
	jwtOK
	jwtFailed
)

// keySource gives a provider's remote keys: nil until fetched. It never
// blocks. The JWKS cache (jwks.go) implements it; call's goroutine.
type keySource interface {
	keys(s *jwksSource) *jwt.KeySet
}

// verify runs the filter over a call: nil when the call passes (then r
// holds the verified payload for RBAC and the request carries the
// providers' headers), else why it fails (a 401).
func (a *jwtAuthn) verify(ctx *fasthttp.RequestCtx, r *rbacReq, ks keySource, now time.Time) error {
	req := a.requirement(r.path)
	if req == nil {
		return nil
	}
	h := &ctx.Request.Header
	if a.bypassCORSPreflight && bytes.Equal(h.Method(), []byte("OPTIONS")) && len(h.Peek("Origin")) > 0 &&
		len(h.Peek("Access-Control-Request-Method")) > 0 {
		return nil
	}
	var stack [4]jwtResult
	results := stack[:0]
	if len(a.providers) > len(stack) {
		results = make([]jwtResult, 0, len(a.providers))
	}
	anyToken := false
	var parsed parsedToken // providers sharing a location share its token
	for _, p := range a.providers {
		res := p.extract(ctx)
		if res.state != jwtMissing {
			anyToken = true
			res = p.check(res, &parsed, ks, now)
		}
		results = append(results, res)
	}
	ok, err := evalJWTReq(req, results, anyToken)
	if !ok {
		if err == nil {
			err = errJWTNotAllowed
		}
		return err
	}
	for i, p := range a.providers {
		if results[i].state == jwtOK {
			p.apply(ctx, r, &results[i])
		}
	}
	return nil
}

// requirement is the first rule's matching path (nil: none applies).
func (a *jwtAuthn) requirement(path []byte) *jwtReq {
	for i := range a.rules {
		ru := &a.rules[i]
		if (ru.path != "" && string(path) == ru.path) || (ru.prefix != "" && bytes.HasPrefix(path, []byte(ru.prefix))) {
			return ru.req
		}
	}
	return nil
}

// evalJWTReq decides a requirement, with the first failure's reason.
func evalJWTReq(q *jwtReq, res []jwtResult, anyToken bool) (bool, error) {
	switch q.kind {
	case reqProvider:
		r := &res[q.provider]
		switch r.state {
		case jwtOK:
			return true, nil
		case jwtFailed:
			return false, r.err
		}
		return false, errJWTMissing
	case reqAllowMissing:
		// Passes without a token; a token present must satisfy a sibling.
		return !anyToken, nil
	case reqAllowMissingOrFailed:
		return true, nil
	case reqAny:
		var first error
		for _, c := range q.children {
			ok, err := evalJWTReq(c, res, anyToken)
			if ok {
				return true, nil
			}
			if first == nil || first == errJWTMissing {
				first = err
			}
		}
		return false, first
	default: // reqAll
		for _, c := range q.children {
			if ok, err := evalJWTReq(c, res, anyToken); !ok {
				return false, err
			}
		}
		return true, nil
	}
}

var (
	errJWTMissing    = errors.New("jwt: missing")
	errJWTNotAllowed = errors.New("jwt: the token does not satisfy the requirement (no provider accepts it)")
)

// extract finds the provider's token in its locations.
func (p *jwtProvider) extract(ctx *fasthttp.RequestCtx) jwtResult {
	h := &ctx.Request.Header
	for _, l := range p.headers {
		v := h.Peek(l.name)
		if len(v) == 0 {
			continue
		}
		if l.prefix != "" {
			// Envoy's value_prefix: the token follows the prefix, to the
			// next comma or space.
			i := bytes.Index(v, []byte(l.prefix))
			if i < 0 {
				continue
			}
			v = v[i+len(l.prefix):]
			if j := bytes.IndexAny(v, ", "); j >= 0 {
				v = v[:j]
			}
		}
		if len(v) > 0 {
			return jwtResult{state: jwtFailed, header: l.name, raw: v}
		}
	}
	for _, q := range p.params {
		if v := ctx.QueryArgs().Peek(q); len(v) > 0 {
			return jwtResult{state: jwtFailed, raw: v}
		}
	}
	for _, c := range p.cookies {
		if v := h.Cookie(c); len(v) > 0 {
			return jwtResult{state: jwtFailed, raw: v}
		}
	}
	return jwtResult{state: jwtMissing}
}

// check verifies a token found: its issuer, keys, signature, times and
// audiences.
func (p *jwtProvider) check(res jwtResult, parsed *parsedToken, ks keySource, now time.Time) jwtResult {
	if tok := p.cache.get(res.raw, now, p.skew); tok != nil {
		res.state, res.tok = jwtOK, tok
		return res
	}
	if parsed.tok == nil && parsed.err == nil || parsed.raw != string(res.raw) {
		parsed.raw = string(res.raw)
		parsed.tok, parsed.err = jwt.Parse(parsed.raw)
	}
	tok, err := parsed.tok, parsed.err
	if err != nil {
		res.err = err
		return res
	}
	if p.issuer != "" && tok.Claims.Issuer != p.issuer {
		res.err = errJWTIssuer
		return res
	}
	keys := p.local
	if keys == nil && ks != nil {
		keys = ks.keys(p.remote)
	}
	if err := tok.Verify(keys, now, p.skew, p.audiences); err != nil {
		res.err = err
		return res
	}
	p.cache.put(parsed.raw, tok)
	res.state, res.tok = jwtOK, tok
	return res
}

// parsedToken is the last token parsed during one call.
type parsedToken struct {
	raw string
	tok *jwt.Token
	err error
}

var errJWTIssuer = errors.New("jwt: issuer is not configured")

// apply does what a verified token's provider asks: the payload in the
// call's metadata (RBAC), headers for the upstream, and the token's header
// removed unless forwarded.
func (p *jwtProvider) apply(ctx *fasthttp.RequestCtx, r *rbacReq, res *jwtResult) {
	h := &ctx.Request.Header
	if p.metaKey != "" {
		r.jwtKey, r.jwtPayload = p.metaKey, res.tok.Claims.All
	}
	if p.payloadTo != "" {
		h.Set(p.payloadTo, base64.RawURLEncoding.EncodeToString(res.tok.Payload))
	}
	for _, c := range p.claims {
		if v, ok := claimValue(res.tok.Claims.All, c.path); ok {
			h.Set(c.header, v)
		}
	}
	if !p.forward && res.header != "" {
		h.Del(res.header)
	}
}

// claimValue is a claim as a header value: a string as it is, a number
// or boolean in JSON, a list of them joined by commas; objects are not.
func claimValue(all map[string]any, path []string) (string, bool) {
	v := lookupClaim(all, path)
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := claimValue(map[string]any{"": e}, []string{""})
			if !ok {
				return "", false
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), true
	}
	return "", false
}

// lookupClaim follows path into nested objects (nil: absent).
func lookupClaim(all map[string]any, path []string) any {
	var v any = all
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = m[k]; !ok {
			return nil
		}
	}
	return v
}

// jwtDenied answers a call whose token failed: 401, as Envoy, with a
// WWW-Authenticate challenge.
func jwtDenied(ctx *fasthttp.RequestCtx, msg string) string {
	ctx.Response.Reset()
	ctx.SetStatusCode(fasthttp.StatusUnauthorized)
	ctx.SetContentType("text/plain")
	ctx.Response.Header.Set(ErrorHeader, reasonJWT)
	ctx.Response.Header.Set("Via", viaValue)
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="`+string(ctx.Host())+`", error="invalid_token"`)
	ctx.SetBodyString(msg)
	return msg
}

// decodeJWTFilter reads the jwt_authn filter of an HCM into the filter
// chain's entry for it.
func decodeJWTFilter(f *hcm.HttpFilter, path string) (*rbacFilter, error) {
	a := f.GetTypedConfig()
	if a == nil || a.GetTypeUrl() != jwtTypeURL {
		// Named jwt_authn but of another type: refused, never skipped, or
		// its tokens would pass unchecked.
		return nil, fieldErr(path+".typed_config", "type %q: the JWT filter needs %q", a.GetTypeUrl(), jwtTypeURL)
	}
	if f.GetConfigDiscovery() != nil {
		return nil, fieldErr(path+".config_discovery", "the JWT filter's config must be inline (typed_config)")
	}
	cfg := new(jwtpb.JwtAuthentication)
	if err := a.UnmarshalTo(cfg); err != nil {
		return nil, fieldErr(path+".typed_config", "%v", err)
	}
	j, err := compileJWTAuthn(cfg, path+".typed_config")
	if err != nil {
		return nil, err
	}
	return &rbacFilter{name: f.GetName(), disabled: f.GetDisabled(), jwt: j}, nil
}
