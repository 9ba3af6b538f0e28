package gateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"testing"
	"time"

	jwtpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// benchSigner signs tokens with an ES256 or RS256 key and gives its JWKS.
type benchSigner struct {
	alg  string
	ec   *ecdsa.PrivateKey
	rsa  *rsa.PrivateKey
	jwks string
}

func newBenchSigner(b testing.TB, alg string) *benchSigner {
	s := &benchSigner{alg: alg}
	b64 := base64.RawURLEncoding.EncodeToString
	var key map[string]string
	if alg == "ES256" {
		s.ec, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		pad := func(v []byte) []byte { return append(make([]byte, 32-len(v)), v...) }
		key = map[string]string{"kty": "EC", "crv": "P-256", "x": b64(pad(s.ec.X.Bytes())), "y": b64(pad(s.ec.Y.Bytes()))}
	} else {
		s.rsa, _ = rsa.GenerateKey(rand.Reader, 2048)
		key = map[string]string{"kty": "RSA", "n": b64(s.rsa.N.Bytes()), "e": b64(big.NewInt(int64(s.rsa.E)).Bytes())}
	}
	key["kid"], key["alg"] = "k", alg
	j, _ := json.Marshal(map[string]any{"keys": []any{key}})
	s.jwks = string(j)
	return s
}

func (s *benchSigner) token(b testing.TB, claims map[string]any) string {
	b64 := base64.RawURLEncoding.EncodeToString
	h, _ := json.Marshal(map[string]string{"alg": s.alg, "kid": "k"})
	p, _ := json.Marshal(claims)
	signed := b64(h) + "." + b64(p)
	sum := sha256.Sum256([]byte(signed))
	var sig []byte
	if s.ec != nil {
		r, ss, err := ecdsa.Sign(rand.Reader, s.ec, sum[:])
		if err != nil {
			b.Fatal(err)
		}
		sig = make([]byte, 64)
		r.FillBytes(sig[:32])
		ss.FillBytes(sig[32:])
	} else {
		var err error
		if sig, err = rsa.SignPKCS1v15(rand.Reader, s.rsa, crypto.SHA256, sum[:]); err != nil {
			b.Fatal(err)
		}
	}
	return signed + "." + b64(sig)
}

// distinct signs 1000 tokens differing in a claim, as "Bearer " values.
func distinct(b testing.TB, s *benchSigner, claims map[string]any) []string {
	out := make([]string, 1000)
	for i := range out {
		c := map[string]any{"n": i}
		for k, v := range claims {
			c[k] = v
		}
		out[i] = "Bearer " + s.token(b, c)
	}
	return out
}

// securityFilters decodes the filters Sextant's control plane publishes
// for docs (a RequestAuthentication, AuthorizationPolicies), as the
// gateway reads them.
func securityFilters(b testing.TB, docs string) []*rbacFilter {
	objs, err := config.Decode([]byte(docs))
	if err != nil {
		b.Fatal(err)
	}
	fs, err := decodeHTTPFilters(append([]*hcm.HttpFilter(nil), xds.SecurityFilters(objs)...), "")
	if err != nil {
		b.Fatal(err)
	}
	return fs
}

// BenchmarkRouteCallJWT is the gateway's per-call work in process (as
// BenchmarkRouteCall) with the JWT filter a RequestAuthentication
// publishes (inline JWKS): "none" no security filter (the baseline), "no
// token" the filter on a call without one, "ES256" and "RS256" a call with
// the same valid token on every call (verified once, then found in the
// provider's token cache, as Envoy's), "ES256 fresh" and "RS256 fresh" a
// different token on each call (1000, more than the cache holds: each is
// verified: 2048-bit RSA), "ES256+policy" the repeated token through an
// AuthorizationPolicy requiring its principal and a claim.
func BenchmarkRouteCallJWT(b *testing.B) {
	spec := &clusterSpec{name: "svc", service: "svc", policy: policySpec{name: "round_robin"}, connect: time.Second}
	pol, err := newPolicy(spec)
	if err != nil {
		b.Fatal(err)
	}
	ms := newMetrics()
	c, err := newClusterRT(spec, pol, ms.cluster("svc"))
	if err != nil {
		b.Fatal(err)
	}
	var p pools
	defer p.closeAll()
	if err := c.setHosts([]hostSpec{{addr: "10.0.0.1:80", weight: 1, healthy: true, labels: label.FromMap(nil)}}, &p, ms); err != nil {
		b.Fatal(err)
	}
	const ra = "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: j, namespace: d}\nspec:\n  jwtRules:\n  - issuer: iss\n    jwks: '%s'\n"
	const ap = "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: d}\nspec:\n  rules:\n" +
		"  - from: [{source: {requestPrincipals: [iss/alice]}}]\n    when: [{key: 'request.auth.claims[groups]', values: [g1]}]\n"
	claims := map[string]any{"iss": "iss", "sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "groups": []string{"g1"}}
	es, rs := newBenchSigner(b, "ES256"), newBenchSigner(b, "RS256")
	for _, tc := range []struct {
		name    string
		filters []*rbacFilter
		tokens  []string
	}{
		{"none", nil, nil},
		{"no token", securityFilters(b, fmt.Sprintf(ra, es.jwks)), nil},
		{"ES256", securityFilters(b, fmt.Sprintf(ra, es.jwks)), []string{"Bearer " + es.token(b, claims)}},
		{"ES256 fresh", securityFilters(b, fmt.Sprintf(ra, es.jwks)), distinct(b, es, claims)},
		{"RS256 fresh", securityFilters(b, fmt.Sprintf(ra, rs.jwks)), distinct(b, rs, claims)},
		{"ES256+policy", securityFilters(b, fmt.Sprintf(ra, es.jwks)+ap), []string{"Bearer " + es.token(b, claims)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rc := &routeConfigSpec{name: "r", vhosts: []*vhostSpec{{name: "v", domains: []string{"*"}, routes: []*routeSpec{{
				match: matchSpec{kind: matchPrefix, value: "/"}, clusters: []clusterWeight{{name: "svc", weight: 1}}}}}}}
			tb := newTable(rc, map[string]*clusterRT{"svc": c})
			tb.rbac = tc.filters
			g := &Gateway{metrics: ms}
			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				ctx.Request.Header.Reset()
				ctx.Response.Header.Reset()
				ctx.Request.Header.SetRequestURI("/items")
				ctx.Request.Header.SetHost("svc.example.com")
				if len(tc.tokens) > 0 {
					ctx.Request.Header.Set("Authorization", tc.tokens[i%len(tc.tokens)])
				}
				if _, cl, _, _, _ := g.routeCall(&ctx, tb, time.Time{}, scanRequestHead(&ctx.Request.Header)); cl == nil {
					b.Fatalf("refused: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		})
	}
}

// FuzzJWTAuthnConfig: any jwt_authn config either compiles or is refused
// with an error; a compiled one runs over calls with and without a token
// without panicking, and a token it passes was verified by a provider.
func FuzzJWTAuthnConfig(f *testing.F) {
	es := newBenchSigner(f, "ES256")
	const ra = "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: j, namespace: d}\nspec:\n  jwtRules:\n" +
		"  - {issuer: iss, jwks: '%s', fromCookies: [s], outputClaimToHeaders: [{header: x-a, claim: a.b}]}\n  - {issuer: other, jwksUri: 'http://127.0.0.1:1/k'}\n"
	objs, err := config.Decode([]byte(fmt.Sprintf(ra, es.jwks)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(xds.JWTFilter(objs).GetTypedConfig().GetValue())
	token := es.token(f, map[string]any{"iss": "iss", "sub": "s", "a": map[string]any{"b": []any{1.5, true, "x"}}})
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := new(jwtpb.JwtAuthentication)
		if proto.Unmarshal(b, cfg) != nil {
			return
		}
		a, err := compileJWTAuthn(cfg, "")
		if err != nil {
			return
		}
		for _, h := range []string{"", "Bearer " + token, "Bearer x.y.z"} {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetRequestURI("/p?access_token=a.b.c")
			if h != "" {
				ctx.Request.Header.Set("Authorization", h)
				ctx.Request.Header.SetCookie("s", h[len("Bearer "):])
			}
			var r rbacReq
			r.of(&ctx)
			if a.verify(&ctx, &r, nil, time.Now()) == nil && r.jwtPayload != nil && h != "Bearer "+token {
				t.Fatalf("a payload from an unverified token %q", h)
			}
		}
	})
}

// TestJWTTwoIssuers: Istio's requirement for two issuers (requires_any of
// requires_all{each provider or none} and each provider) as the gateway
// decides it: either issuer's token passes and its payload is the
// metadata, each read from its own locations; a token of an issuer no
// rule names, a garbage token, a token
// signed by the other issuer's key fail; no token passes.
func TestJWTTwoIssuers(t *testing.T) {
	es, rs := newBenchSigner(t, "ES256"), newBenchSigner(t, "RS256")
	const ra = "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: j, namespace: d}\nspec:\n  jwtRules:\n" +
		"  - {issuer: one, jwks: '%s'}\n  - {issuer: two, jwks: '%s', fromParams: [tok]}\n"
	fs := securityFilters(t, fmt.Sprintf(ra, es.jwks, rs.jwks))
	if len(fs) != 1 || fs[0].jwt == nil || len(fs[0].jwt.providers) != 2 {
		t.Fatalf("filters %+v", fs)
	}
	exp := time.Now().Add(time.Hour).Unix()
	claims := func(iss string) map[string]any { return map[string]any{"iss": iss, "sub": "s-" + iss, "exp": exp} }
	for _, c := range []struct {
		name, header, query string
		ok                  bool
		sub                 string
	}{
		{"none", "", "", true, ""},
		{"issuer one", "Bearer " + es.token(t, claims("one")), "", true, "s-one"},
		{"issuer two in its param", "", rs.token(t, claims("two")), true, "s-two"},
		// Provider two reads only ?tok: in the header, provider one finds
		// it, of another issuer (Envoy: "Jwt issuer is not configured").
		{"issuer two in one's header", "Bearer " + rs.token(t, claims("two")), "", false, ""},
		{"unknown issuer", "Bearer " + es.token(t, claims("three")), "", false, ""},
		{"two signed by one's key", "Bearer " + es.token(t, claims("two")), "", false, ""},
		{"garbage", "Bearer abc", "", false, ""},
		{"basic auth is no token", "Basic dXNlcjpwYXNz", "", true, ""},
	} {
		var ctx fasthttp.RequestCtx
		uri := "/x"
		if c.query != "" {
			uri += "?tok=" + c.query
		}
		ctx.Request.Header.SetRequestURI(uri)
		if c.header != "" {
			ctx.Request.Header.Set("Authorization", c.header)
		}
		var r rbacReq
		r.of(&ctx)
		err := fs[0].jwt.verify(&ctx, &r, nil, time.Now())
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
			continue
		}
		if sub, _ := r.jwtPayload["sub"].(string); sub != c.sub {
			t.Errorf("%s: payload sub %q, want %q", c.name, sub, c.sub)
		}
	}
}

// TestJWTCodeDetails: a 401's %RESPONSE_CODE_DETAILS% is Envoy's
// jwt_authn_access_denied with the status, without spaces.
func TestJWTCodeDetails(t *testing.T) {
	if got := codeDetails(reasonJWT, &call{detail: "jwt: expired"}); got != "jwt_authn_access_denied{jwt:_expired}" {
		t.Errorf("got %q", got)
	}
	if got := codeDetails(reasonJWT, nil); got != "jwt_authn_access_denied" {
		t.Errorf("got %q", got)
	}
}
