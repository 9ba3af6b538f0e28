package sidecar_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// jwtConfig is Istio's end-user authentication task for a workload behind
// its sidecar (plaintext mesh port, so that curl calls it directly).
const jwtConfig = `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: api}
spec:
  mtls: {mode: DISABLE}
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt-example, namespace: api}
spec:
  selector: {matchLabels: {app: httpbin}}
  jwtRules:
  - issuer: testing@secure.istio.io
    jwksUri: %s
`

const jwtPolicy = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: require-jwt, namespace: api}
spec:
  selector: {matchLabels: {app: httpbin}}
  rules:
  - from: [{source: {requestPrincipals: [testing@secure.istio.io/testing@secure.istio.io]}}]
    when: [{key: "request.auth.claims[groups]", values: [group1]}]
`

// TestSidecarJWT: Istio's end-user authentication task with the real
// sextant binary as a workload's sidecar in front of Python's http.server,
// called by Debian's curl: the sidecar fetches the JWKS (served here over
// loopback, keys the test generates); no token 200, a bad token 401, a
// good token 200; with require-jwt, no token 403, a token without group1
// 403, with it 200.
func TestSidecarJWT(t *testing.T) {
	python, err := debian.Ensure("python3", "python3")
	if err != nil {
		t.Fatal(err)
	}
	curlBin, err := debian.Ensure("curl", "curl")
	if err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "RSA", "kid": "k", "alg": "RS256",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(jwks) }))
	defer idp.Close()
	token := func(claims map[string]any) string {
		h, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": "k"})
		p, _ := json.Marshal(claims)
		s := b64(h) + "." + b64(p)
		sum := sha256.Sum256([]byte(s))
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		return s + "." + b64(sig)
	}
	exp := time.Now().Add(time.Hour).Unix()
	good := token(map[string]any{"iss": "testing@secure.istio.io", "sub": "testing@secure.istio.io", "exp": exp, "groups": []string{"group1"}})
	noGroup := token(map[string]any{"iss": "testing@secure.istio.io", "sub": "testing@secure.istio.io", "exp": exp})

	m := startServer(t)
	m.sextant(t, fmt.Sprintf(jwtConfig, idp.URL+"/jwks.json"), "config", "apply", "-f", "-")
	port, _ := startApp(t, python, "httpbin")
	w := m.startWorkload(t, "api/httpbin", port, []string{"app=httpbin"})
	call := func(tok string) string {
		args := []string{"-o", "/dev/null", "-w", "%{http_code}", "http://" + w.mesh + "/headers"}
		if tok != "" {
			args = append(args, "-H", "Authorization: Bearer "+tok)
		}
		out, _ := curl(t, curlBin, args...)
		return strings.TrimSpace(out)
	}
	waitTrue(t, 30*time.Second, "a good token served (the JWKS fetched)", func() bool { return call(good) == "200" })
	for _, c := range []struct{ name, tok, want string }{
		{"no token", "", "200"}, {"bad token", "not.a.token", "401"}, {"good token", good, "200"},
	} {
		if got := call(c.tok); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	m.sextant(t, jwtPolicy, "config", "apply", "-f", "-")
	waitTrue(t, 30*time.Second, "require-jwt enforced", func() bool { return call("") == "403" })
	for _, c := range []struct{ name, tok, want string }{
		{"no token", "", "403"}, {"without group1", noGroup, "403"}, {"with group1", good, "200"}, {"bad token", "x.y.z", "401"},
	} {
		if got := call(c.tok); got != c.want {
			t.Errorf("with require-jwt, %s: %s, want %s", c.name, got, c.want)
		}
	}
}
