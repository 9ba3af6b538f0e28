package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// es256Issuer signs ES256 tokens; its JWKS server answers 503 until up.
type es256Issuer struct {
	key     *ecdsa.PrivateKey
	url     string
	up      atomic.Bool
	fetches atomic.Int64
}

func newES256Issuer(t testing.TB) *es256Issuer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &es256Issuer{key: k}
	b64 := base64.RawURLEncoding.EncodeToString
	pad := func(b []byte) []byte { return append(make([]byte, 32-len(b)), b...) }
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "kid": "es", "alg": "ES256",
		"x": b64(pad(k.X.Bytes())), "y": b64(pad(k.Y.Bytes()))}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		is.fetches.Add(1)
		if !is.up.Load() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		w.Write(jwks)
	}))
	t.Cleanup(srv.Close)
	is.url = srv.URL + "/jwks"
	return is
}

func (is *es256Issuer) token(t testing.TB, claims map[string]any) string {
	b64 := base64.RawURLEncoding.EncodeToString
	h, _ := json.Marshal(map[string]string{"alg": "ES256", "kid": "es"})
	p, _ := json.Marshal(claims)
	signed := b64(h) + "." + b64(p)
	sum := sha256.Sum256([]byte(signed))
	r, s, err := ecdsa.Sign(rand.Reader, is.key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signed + "." + b64(sig)
}

const sidecarJWT = `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  jwtRules:
  - issuer: https://issuer.example/
    jwksUri: %s
    audiences: [orders]
    fromHeaders: [{name: x-token}]
    fromCookies: [session]
    outputClaimToHeaders: [{header: x-jwt-sub, claim: sub}, {header: x-jwt-tier, claim: plan.tier}]
    outputPayloadToHeader: x-jwt-payload
`

const sidecarDenyFree = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-free, namespace: shop}
spec:
  action: DENY
  rules:
  - when: [{key: 'request.auth.claims[plan][tier]', values: [free]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: require-jwt, namespace: shop}
spec:
  rules:
  - from: [{source: {requestPrincipals: ['https://issuer.example//*']}}]
`

// TestInboundJWT: a sidecar's inbound listener with the JWT filter and the
// RBAC filters Sextant's control plane builds (xds.ServerListener) from a
// RequestAuthentication and AuthorizationPolicies. Until the JWKS fetch
// succeeds a good token fails (401): a failing fetch never opens the door.
// Then tokens from a header or a cookie verify, the app gets the claims
// and payload as headers (not the token, which is not forwarded); a bad
// audience is 401; the DENY policy on a nested claim gives 403, the ALLOW
// policy requiring a principal 403 without a token.
func TestInboundJWT(t *testing.T) {
	is := newES256Issuer(t)
	var seen atomic.Value
	app := startUpstream(t, "app", func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Clone())
		fmt.Fprint(w, "app")
	})
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := mln.Addr().String()
	g := gateway.New(gateway.Options{Listener: gateway.ProxyListener, Inbound: &gateway.Inbound{Addr: addr, App: app.addr, Service: "shop/orders"}})
	cp := startControlPlane(t, "")
	serveSidecar(t, g, mln, cp.addr, nodeID)
	publish := func(docs string) {
		t.Helper()
		objs, err := config.Decode([]byte(docs))
		if err != nil {
			t.Fatal(err)
		}
		cp.set(xds.ServerListener(gateway.InboundListenerName(addr), netip.MustParseAddrPort(addr), security.PeerAuthentication_MutualTLS_DISABLE, objs))
	}
	type req struct {
		header, cookie string
	}
	call := func(r req) (int, string) {
		hr, _ := http.NewRequest("GET", "http://"+addr+"/orders", nil)
		if r.header != "" {
			hr.Header.Set("x-token", r.header)
		}
		if r.cookie != "" {
			hr.Header.Set("Cookie", "a=b; session="+r.cookie)
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(hr)
		if err != nil {
			return 0, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	exp := time.Now().Add(time.Hour).Unix()
	claims := func(aud, tier string) map[string]any {
		return map[string]any{"iss": "https://issuer.example/", "sub": "alice", "aud": aud, "exp": exp, "plan": map[string]any{"tier": tier}}
	}
	good, free, wrongAud := is.token(t, claims("orders", "gold")), is.token(t, claims("orders", "free")), is.token(t, claims("billing", "gold"))

	publish(fmt.Sprintf(sidecarJWT, is.url))
	waitFor(t, "the JWT filter", func() bool { s, _ := call(req{header: "x"}); return s == 401 })
	waitFor(t, "a failed JWKS fetch", func() bool { return is.fetches.Load() > 0 })
	if s, b := call(req{header: good}); s != 401 || !strings.Contains(b, "JWKS is not available") {
		t.Fatalf("a good token before the keys arrived: %d %q, want 401", s, b)
	}
	if s, _ := call(req{}); s != 200 {
		t.Fatalf("no token: %d", s)
	}
	is.up.Store(true)
	waitFor(t, "the keys (fetched again after the backoff)", func() bool { s, _ := call(req{header: good}); return s == 200 })
	h := seen.Load().(http.Header)
	if h.Get("x-jwt-sub") != "alice" || h.Get("x-jwt-tier") != "gold" || h.Get("x-token") != "" {
		t.Errorf("the app got x-jwt-sub %q, x-jwt-tier %q, x-token %q", h.Get("x-jwt-sub"), h.Get("x-jwt-tier"), h.Get("x-token"))
	}
	if p, err := base64.RawURLEncoding.DecodeString(h.Get("x-jwt-payload")); err != nil || !strings.Contains(string(p), `"sub":"alice"`) {
		t.Errorf("x-jwt-payload %q: %v", h.Get("x-jwt-payload"), err)
	}
	if s, _ := call(req{cookie: good}); s != 200 {
		t.Errorf("token in a cookie: %d", s)
	}
	if s, b := call(req{header: wrongAud}); s != 401 || !strings.Contains(b, "audiences") {
		t.Errorf("wrong audience: %d %q", s, b)
	}

	publish(fmt.Sprintf(sidecarJWT, is.url) + "---\n" + sidecarDenyFree)
	waitFor(t, "the policies", func() bool { s, _ := call(req{}); return s == 403 })
	for _, c := range []struct {
		name string
		r    req
		want int
	}{{"no token", req{}, 403}, {"free tier", req{header: free}, 403}, {"gold tier", req{header: good}, 200}, {"wrong audience", req{header: wrongAud}, 401}} {
		if s, b := call(c.r); s != c.want {
			t.Errorf("%s: %d %q, want %d", c.name, s, b, c.want)
		}
	}
	// Concurrent calls share the providers' token cache: each still gets
	// its own token's answer.
	var wg sync.WaitGroup
	errs := make(chan string, 160)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				tok, want := good, 200
				if (i+j)%2 == 1 {
					tok, want = free, 403
				}
				if s, b := call(req{header: tok}); s != want {
					errs <- fmt.Sprintf("%d %q, want %d", s, b, want)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error("concurrent:", e)
	}
}
