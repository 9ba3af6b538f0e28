package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// seenUpstream runs an upstream that answers with the method, host and
// request target it got, and keeps the methods it was called with.
type seenUpstream struct {
	addr    *net.TCPAddr
	mu      sync.Mutex
	methods []string
}

func startSeen(t *testing.T) *seenUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &seenUpstream{addr: ln.Addr().(*net.TCPAddr)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.methods = append(s.methods, r.Method)
		s.mu.Unlock()
		fmt.Fprintf(w, "%s host=%s uri=%s", r.Method, r.Host, r.RequestURI)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *seenUpstream) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.methods...)
}

// applyTraffic registers one instance of service svc at u and applies cfg.
func applyTraffic(t *testing.T, api *client.Client, svc string, u *seenUpstream, cfg string) {
	t.Helper()
	ctx := context.Background()
	if _, err := api.Register(ctx, client.Instance{ID: svc + "-1", Service: svc, Host: "127.0.0.1", Port: u.addr.Port}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ApplyConfig(ctx, []byte(cfg), false); err != nil {
		t.Fatal(err)
	}
}

const rewriteConfig = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /v1/reviews}}]
    rewrite: {uri: /reviews, authority: reviews.internal}
    route: [{destination: {host: reviews}}]
  - match: [{uri: {exact: /old}}]
    rewrite: {uri: /new}
    route: [{destination: {host: reviews}}]
  - match: [{uri: {prefix: /svc}}]
    rewrite:
      uriRegexRewrite: {match: '^/svc/([^/]+)(/.*)$', rewrite: '\2/of/\1'}
    route: [{destination: {host: reviews}}]
  - route: [{destination: {host: reviews}}]
`

// TestIstioRewrite: a VirtualService's rewrite through the real server and
// gateway: the upstream sees the prefix swapped (query kept), an exact
// path replaced, the authority rewritten, and a path rewritten by RE2.
func TestIstioRewrite(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	api, proxy, admin := startMesh(t)
	u := startSeen(t)
	applyTraffic(t, api, "reviews", u, rewriteConfig)
	defer func() {
		if t.Failed() {
			resp, err := http.Get("http://" + admin + "/v1/config")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("%s", b)
			}
		}
	}()
	waitBody(t, proxy, "reviews", "/old", "GET host=reviews uri=/new")
	for path, want := range map[string]string{
		"/old":                 "GET host=reviews uri=/new",
		"/v1/reviews/7?full=1": "GET host=reviews.internal uri=/reviews/7?full=1",
		"/svc/ratings/a/b?x=1": "GET host=reviews uri=/a/b/of/ratings?x=1",
		"/other":               "GET host=reviews uri=/other",
	} {
		if code, body, _ := gwCall(t, proxy, "reviews", path, nil); code != 200 || body != want {
			t.Errorf("%s: %d %q, want %q", path, code, body, want)
		}
	}
}

// waitBody waits (bounded) for the gateway to answer path with body want,
// once the config is through.
func waitBody(t *testing.T, proxy, host, path, want string) {
	t.Helper()
	var code int
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if code, body, _ = gwCall(t, proxy, host, path, nil); body == want {
			return
		}
	}
	t.Errorf("%s: %d %q after 10s, want %q", path, code, body, want)
}

const redirectConfig = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: details}
spec:
  hosts: [details]
  http:
  - match: [{uri: {exact: /v1/details}}]
    redirect: {uri: /v2/details}
  - match: [{uri: {prefix: /old/}}]
    redirect: {prefixRewrite: /new/, authority: details.example, port: 8443, scheme: https, redirectCode: 308}
  - match: [{uri: {prefix: /same-port}}]
    redirect: {authority: other.example, derivePort: FROM_REQUEST_PORT, redirectCode: 302}
  - route: [{destination: {host: details}}]
`

// TestIstioRedirect: a VirtualService's redirect through the real server
// and gateway, seen by Go's client without following: the gateway answers
// with the code (301 unless set) and Location (path, matched prefix,
// authority, port, scheme, the request's port), never calling the upstream.
func TestIstioRedirect(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	api, proxy, _ := startMesh(t)
	u := startSeen(t)
	applyTraffic(t, api, "details", u, redirectConfig)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(host, path string) (int, string) {
		req, err := http.NewRequest("GET", "http://"+proxy+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Location")
	}
	// Until the VirtualService reaches the gateway (it is applied after
	// the instance registers), the service's default route calls the
	// upstream: only calls from the first redirect on must not.
	var code int
	var loc string
	called := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		called = len(u.seen())
		if code, loc = get("details", "/v1/details?id=1"); code == 301 {
			break
		}
	}
	if code != 301 || loc != "http://details/v2/details?id=1" {
		t.Fatalf("uri: %d %q, want 301 http://details/v2/details?id=1", code, loc)
	}
	if code, loc := get("details", "/old/a/b?x=1"); code != 308 || loc != "https://details.example:8443/new/a/b?x=1" {
		t.Fatalf("prefix: %d %q", code, loc)
	}
	if code, loc := get("details:8080", "/same-port"); code != 302 || loc != "http://other.example:8080/same-port" {
		t.Fatalf("the request's port: %d %q", code, loc)
	}
	if n := len(u.seen()) - called; n != 0 {
		t.Fatalf("the upstream was called %d times by redirected requests", n)
	}
}
