package config

import (
	"os"
	"testing"

	"github.com/sextant-mesh/sextant/internal/label"
)

// TestRequestAuthentication: Istio's end-user authentication task's
// policies decode, apply to the workloads they select (their own, their
// namespace's, the mesh's), and give one rule per issuer.
func TestRequestAuthentication(t *testing.T) {
	const doc = `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt-example, namespace: foo}
spec:
  selector: {matchLabels: {app: httpbin}}
  jwtRules:
  - issuer: testing@secure.istio.io
    jwksUri: https://raw.githubusercontent.com/istio/istio/release-1.24/security/tools/jwt/samples/jwks.json
    audiences: [a, b]
    fromHeaders: [{name: x-jwt, prefix: 'Bearer '}]
    fromParams: [token]
    fromCookies: [session]
    outputPayloadToHeader: x-jwt-payload
    forwardOriginalToken: true
    outputClaimToHeaders: [{header: x-sub, claim: sub}]
    timeout: 5s
---
apiVersion: security.istio.io/v1beta1
kind: RequestAuthentication
metadata: {name: mesh, namespace: istio-system}
spec:
  jwtRules:
  - issuer: testing@secure.istio.io
    jwksUri: https://other/jwks.json
  - issuer: other
    jwks: '{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}'
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: require-jwt, namespace: foo}
spec:
  selector: {matchLabels: {app: httpbin}}
  rules:
  - from: [{source: {requestPrincipals: [testing@secure.istio.io/testing@secure.istio.io], notRequestPrincipals: ['*']}}]
    when:
    - {key: 'request.auth.claims[groups]', values: [group1]}
    - {key: 'request.auth.claims[nested][key]', values: [v]}
    - {key: request.auth.audiences, values: [a]}
    - {key: request.auth.presenters, values: [p]}
    - {key: request.auth.principal, notValues: ['*']}
`
	objs, err := Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSecurity("", objs)
	httpbin := Workload{Namespace: "foo", Labels: label.FromMap(map[string]string{"app": "httpbin"})}
	other := Workload{Namespace: "foo", Labels: label.FromMap(map[string]string{"app": "sleep"})}
	if got := s.RequestAuthentications(httpbin); len(got) != 2 || got[0].Name != "jwt-example" || got[1].Name != "mesh" {
		t.Fatalf("httpbin's: %v", got)
	}
	if got := s.RequestAuthentications(other); len(got) != 1 || got[0].Name != "mesh" {
		t.Fatalf("sleep's: %v", got)
	}
	rules := JWTRules(s.RequestAuthentications(httpbin))
	if len(rules) != 2 || rules[0].Timeout == nil || rules[1].Issuer != "other" {
		t.Fatalf("rules: %v", rules)
	}
	if b, err := os.ReadFile("testdata/requestauth.yaml"); err != nil {
		t.Fatal(err)
	} else if objs, err := Decode(b); err != nil || len(objs) != 2 {
		t.Fatalf("testdata/requestauth.yaml: %d objects, %v", len(objs), err)
	}
	if a, name, err := ConditionKey("request.auth.claims[nested][key]"); err != nil || a != CondRequestClaims || len(ClaimPath(name)) != 2 {
		t.Fatalf("claims key: %q %q %v", a, name, err)
	}
}
