package main

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

const corsConfig = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: productpage}
spec:
  hosts: [productpage]
  http:
  - corsPolicy:
      allowOrigins: [{exact: 'https://shop.example'}, {regex: 'https://.*\.test\.example'}]
      allowMethods: [GET, POST]
      allowHeaders: [x-custom, content-type]
      exposeHeaders: [x-trace]
      maxAge: 24h
      allowCredentials: true
      unmatchedPreflights: IGNORE
    route: [{destination: {host: productpage}}]
`

// TestIstioCORS: a VirtualService's corsPolicy through the real server and
// gateway: a preflight from an allowed origin is answered by the gateway
// with the allow headers (the upstream never sees the OPTIONS), one from
// another origin is answered without them (unmatchedPreflights IGNORE),
// and an actual request from an allowed origin gets its
// Access-Control-Allow-Origin, one from another origin none.
func TestIstioCORS(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	api, proxy, _ := startMesh(t)
	u := startSeen(t)
	applyTraffic(t, api, "productpage", u, corsConfig)
	call := func(method, origin string, h map[string]string) *http.Response {
		req, err := http.NewRequest(method, "http://"+proxy+"/products", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "productpage"
		req.Header.Set("Origin", origin)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp = call("GET", "https://shop.example", nil); resp.Header.Get("Access-Control-Allow-Origin") != "" {
			break
		}
	}
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://shop.example" ||
		resp.Header.Get("Access-Control-Allow-Credentials") != "true" || resp.Header.Get("Access-Control-Expose-Headers") != "x-trace" {
		t.Fatalf("actual request: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := call("GET", "https://evil.example", nil); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("actual request from another origin: %d %v", resp.StatusCode, resp.Header)
	}
	pre := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-custom"}
	resp = call("OPTIONS", "https://a.test.example", pre)
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://a.test.example" ||
		resp.Header.Get("Access-Control-Allow-Methods") != "GET,POST" || resp.Header.Get("Access-Control-Allow-Headers") != "x-custom,content-type" ||
		resp.Header.Get("Access-Control-Max-Age") != "86400" || resp.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := call("OPTIONS", "https://evil.example", pre); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin: %d %v", resp.StatusCode, resp.Header)
	}
	if slices.Contains(u.seen(), "OPTIONS") {
		t.Fatalf("the upstream saw a preflight: %v", u.seen())
	}
}
