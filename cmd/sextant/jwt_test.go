package main

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// jwtIssuer signs RS256 tokens with a key it generates and serves its
// JWKS over loopback HTTP, as an identity provider's jwksUri.
type jwtIssuer struct {
	key     *rsa.PrivateKey
	url     string
	fetches atomic.Int64
}

func newJWTIssuer(t *testing.T) *jwtIssuer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &jwtIssuer{key: k}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "RSA", "kid": "test", "alg": "RS256", "use": "sig",
		"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		is.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write(jwks)
	}))
	t.Cleanup(srv.Close)
	is.url = srv.URL + "/jwks.json"
	return is
}

// token signs claims (RS256, kid "test"); with key another key's signature.
func (is *jwtIssuer) token(t *testing.T, claims map[string]any, key *rsa.PrivateKey) string {
	t.Helper()
	if key == nil {
		key = is.key
	}
	b64 := base64.RawURLEncoding.EncodeToString
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": "test", "typ": "JWT"})
	p, _ := json.Marshal(claims)
	signed := b64(h) + "." + b64(p)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + b64(sig)
}

// jwtGateway is Istio's end-user authentication task's setup on the
// gateway: a Gateway and VirtualService, and a RequestAuthentication for
// the gateway's workloads whose keys are at a jwksUri.
const jwtGateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: http, protocol: HTTP}
    hosts: [shop.example.com]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [shop-gw]
  http:
  - route: [{destination: {host: orders}}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt-example}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  jwtRules:
  - issuer: testing@secure.istio.io
    jwksUri: %s
    outputClaimToHeaders: [{header: x-jwt-sub, claim: sub}]
`

// requireJWT is the task's AuthorizationPolicy: a token of the issuer
// whose groups claim holds group1 is required.
const requireJWT = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: require-jwt}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: ALLOW
  rules:
  - from: [{source: {requestPrincipals: [testing@secure.istio.io/testing@secure.istio.io]}}]
    when: [{key: 'request.auth.claims[groups]', values: [group1]}]
`

// TestIstioJWTEndToEnd: Istio's end-user authentication task through a
// real server and gateway: with a RequestAuthentication a call without a
// token passes, one with a bad token gets 401, one with a good token 200;
// with an
// AuthorizationPolicy requiring the issuer's principal and a groups claim,
// no token gets 403, a token without the claim 403, one with it 200.
func TestIstioJWTEndToEnd(t *testing.T) {
	api, proxy, _, server := startMeshTLS(t, "")
	up := startUpstream(t, "orders-1")
	if _, err := api.Register(context.Background(), client.Instance{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: up.addr.Port}); err != nil {
		t.Fatal(err)
	}
	is := newJWTIssuer(t)
	_, port, _ := net.SplitHostPort(proxy)
	var p int
	fmt.Sscan(port, &p)
	if out, err := runOn(t, server, fmt.Sprintf(jwtGateway, p, is.url), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	exp := time.Now().Add(time.Hour).Unix()
	good := is.token(t, map[string]any{"iss": "testing@secure.istio.io", "sub": "testing@secure.istio.io", "exp": exp, "groups": []string{"group1", "group2"}}, nil)
	noGroup := is.token(t, map[string]any{"iss": "testing@secure.istio.io", "sub": "testing@secure.istio.io", "exp": exp, "groups": []string{"group2"}}, nil)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged := is.token(t, map[string]any{"iss": "testing@secure.istio.io", "sub": "testing@secure.istio.io", "exp": exp}, other)
	expired := is.token(t, map[string]any{"iss": "testing@secure.istio.io", "sub": "x", "exp": time.Now().Add(-time.Hour).Unix()}, nil)

	call := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+proxy+"/headers", nil)
		req.Host = "shop.example.com"
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	// The good token passes once the keys are fetched (until then it fails).
	waitTrue(t, 15*time.Second, func() bool { s, _ := call(good); return s == 200 })
	if is.fetches.Load() == 0 {
		t.Fatal("the JWKS was never fetched")
	}
	for _, c := range []struct {
		name, token string
		status      int
		body        string
	}{
		{"no token", "", 200, "orders-1"},
		{"good token", good, 200, "orders-1"},
		{"garbage", "deadbeef", 401, "jwt:"},
		{"forged", forged, 401, "signature"},
		{"expired", expired, 401, "expired"},
	} {
		if s, b := call(c.token); s != c.status || !strings.Contains(b, c.body) {
			t.Errorf("%s: %d %q, want %d %q", c.name, s, b, c.status, c.body)
		}
	}

	if out, err := runOn(t, server, requireJWT, "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool { s, _ := call(""); return s == 403 })
	for _, c := range []struct {
		name, token string
		status      int
	}{
		{"no token", "", 403},
		{"token without group1", noGroup, 403},
		{"token with group1", good, 200},
		{"forged", forged, 401},
	} {
		if s, b := call(c.token); s != c.status {
			t.Errorf("with require-jwt, %s: %d %q, want %d", c.name, s, b, c.status)
		}
	}
}
