package xds

import (
	"strings"
	"testing"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sextant-mesh/sextant/internal/config"
)

const jwtPolicies = `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: foo}
spec:
  jwtRules:
  - issuer: testing@secure.istio.io
    jwksUri: https://keys.example:8443/jwks.json
    fromHeaders: [{name: x-jwt, prefix: 'Bearer '}]
    outputClaimToHeaders: [{header: x-sub, claim: sub}]
    forwardOriginalToken: true
  - issuer: other
    jwks: '{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}'
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: require, namespace: foo}
spec:
  rules:
  - from: [{source: {requestPrincipals: ['testing@secure.istio.io/*', 'https://a.example/x/sub']}}]
    when: [{key: 'request.auth.claims[groups]', values: [group1]}]
`

// TestJWTFilter: RequestAuthentications become Istio's jwt_authn filter,
// valid by Envoy's rules, optional (grpc-go skips it), before the RBAC
// filters, whose request principals match the payload's iss and sub.
func TestJWTFilter(t *testing.T) {
	objs, err := config.Decode([]byte(jwtPolicies))
	if err != nil {
		t.Fatal(err)
	}
	fs := SecurityFilters(objs)
	if len(fs) != 2 || fs[0].Name != JWTFilterName || !fs[0].IsOptional || fs[1].Name != RBACAllowFilter {
		t.Fatalf("filters %v", fs)
	}
	cfg := &jwtv3.JwtAuthentication{}
	if err := fs[0].GetTypedConfig().UnmarshalTo(cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	p0 := cfg.Providers["origins-0"]
	if p0.GetIssuer() != "testing@secure.istio.io" || p0.GetRemoteJwks().GetHttpUri().GetCluster() != "outbound|8443||keys.example" ||
		!p0.Forward || p0.PayloadInMetadata != JWTPayloadKey || p0.FromHeaders[0].ValuePrefix != "Bearer " || p0.ClaimToHeaders[0].HeaderName != "x-sub" {
		t.Errorf("provider 0: %v", p0)
	}
	if cfg.Providers["origins-1"].GetLocalJwks().GetInlineString() == "" {
		t.Errorf("provider 1: %v", cfg.Providers["origins-1"])
	}
	req := cfg.Rules[0].GetRequires().GetRequiresAny().GetRequirements()
	if len(req) != 3 || len(req[0].GetRequiresAll().GetRequirements()) != 2 || req[1].GetProviderName() != "origins-0" {
		t.Errorf("requirement: %v", cfg.Rules[0])
	}
	rb := &rbacv3.RBAC{}
	if err := fs[1].GetTypedConfig().UnmarshalTo(rb); err != nil {
		t.Fatal(err)
	}
	if err := rb.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	// protojson randomizes its spacing per binary ("a":  "b"): one space.
	js := strings.ReplaceAll(protojson.Format(rb), ":  ", ": ")
	for _, want := range []string{`"filter": "envoy.filters.http.jwt_authn"`, `"key": "payload"`, `"key": "groups"`,
		`"exact": "https://a.example/x"`, `"exact": "testing@secure.istio.io"`, `"listMatch"`} {
		if !strings.Contains(js, want) {
			t.Errorf("RBAC lacks %s:\n%s", want, js)
		}
	}
}

// TestRequestPrincipalSplits: a principal may split at any "/".
func TestRequestPrincipalSplits(t *testing.T) {
	for _, c := range []struct {
		v    string
		alts int
	}{{"iss/sub", 1}, {"https://a/b/sub", 4}, {"iss/*", 2}, {"*/sub", 2}, {"nosplit", 0}} {
		p := requestPrincipalID(c.v)
		got := len(p.GetOrIds().GetIds())
		if got == 0 && p.GetAndIds() != nil {
			got = 1
		}
		if got == 0 && p.GetMetadata() != nil {
			got = 1
		}
		if got != c.alts {
			t.Errorf("%s: %d alternatives, want %d: %v", c.v, got, c.alts, p)
		}
		if err := (&rbacconfigv3.Principal{Identifier: p.Identifier}).ValidateAll(); err != nil {
			t.Errorf("%s: %v", c.v, err)
		}
	}
}
