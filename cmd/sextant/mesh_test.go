package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// upstream is a real HTTP server on loopback answering with its name.
type upstream struct {
	name  string
	addr  *net.TCPAddr
	calls atomic.Int64
	fail  atomic.Bool
	srv   *http.Server
}

func startUpstream(t *testing.T, name string) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{name: name, addr: ln.Addr().(*net.TCPAddr)}
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		if u.fail.Load() {
			http.Error(w, "failing on purpose", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, u.name)
	})}
	go u.srv.Serve(ln)
	t.Cleanup(func() { u.srv.Close() })
	return u
}

// startMesh runs the server and a gateway configured by it, as the binary
// runs them, until the test ends.
func startMesh(t *testing.T) (api *client.Client, proxy, admin string) {
	t.Helper()
	api, proxy, admin, _ = startMeshTLS(t, "")
	return api, proxy, admin
}

// startMeshTLS is startMesh with the gateway serving TLS on tlsAddr too
// (none if empty); server is the registry's base URL.
func startMeshTLS(t *testing.T, tlsAddr string) (api *client.Client, proxy, admin, server string) {
	t.Helper()
	return startMeshWith(t, tlsAddr, 10*time.Second, nil)
}

// startMeshWith runs the server and a gateway (TLS on tlsAddr unless
// empty), gw changing the gateway's flags first (given the server's base
// URL), and waits up to ready for the server to be ready.
func startMeshWith(t *testing.T, tlsAddr string, ready time.Duration, gw func(f *gatewayFlags, server string)) (api *client.Client, proxy, admin, server string) {
	t.Helper()
	httpAddr, xdsAddr := freeAddr(t), freeAddr(t)
	proxy, admin = freeAddr(t), freeAddr(t)
	server = "http://" + httpAddr
	ctx, cancel := context.WithCancel(context.Background())
	serverDone, gatewayDone := make(chan error, 1), make(chan error, 1)
	data := t.TempDir() // here: its removal must come after the server's stop below
	go func() {
		serverDone <- runServer(ctx, serverFlags{data: data, http: httpAddr, xds: xdsAddr, logFormat: "text",
			logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second})
	}()
	f := gatewayFlags{xds: xdsAddr, listen: proxy, admin: admin,
		data: filepath.Join(t.TempDir(), "gw"), node: "mesh-test-gateway", service: "sextant-gateway", tlsListen: tlsListen(tlsAddr),
		maxBody: 1 << 20, retainAge: time.Hour, retainBytes: 1 << 30, drain: 5 * time.Second,
		logFormat: "text", logLevel: "error"}
	if gw != nil {
		gw(&f, server)
	}
	gctx, gcancel := context.WithCancel(context.Background())
	go func() { gatewayDone <- runGateway(gctx, f) }()
	t.Cleanup(func() {
		gcancel()
		if err := <-gatewayDone; err != nil {
			t.Errorf("gateway: %v", err)
		}
		cancel()
		if err := <-serverDone; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	c, err := client.New(server)
	if err != nil {
		t.Fatal(err)
	}
	answers := func(url string) func() bool {
		return func() bool {
			resp, err := http.Get(url)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
	}
	waitTrue(t, ready, answers(server+"/readyz"))
	// The gateway starts beside the server: a test asking its admin API at
	// once found nothing listening yet on a loaded machine.
	if f.admin != "" {
		waitTrue(t, ready, answers("http://"+f.admin+"/healthz"))
	}
	return c, proxy, admin, server
}

func tlsListen(addr string) []string {
	if addr == "" {
		return nil
	}
	return []string{addr}
}

func waitTrue(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get calls the gateway for host and path with headers and returns the
// answering upstream's name, or the status and body of an error.
func get(t *testing.T, proxy, host, path string, headers map[string]string) (string, int) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+proxy+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

func tally(t *testing.T, proxy string, n int, headers map[string]string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		name, code := get(t, proxy, "orders", "/", headers)
		if code != http.StatusOK {
			name = fmt.Sprintf("%d %s", code, strings.TrimSpace(name))
		}
		got[name]++
	}
	return got
}

const meshConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - match: [{headers: {x-canary: {exact: "yes"}}}]
    route: [{destination: {host: orders, subset: v2}}]
  - route:
    - {destination: {host: orders, subset: v1}, weight: 75}
    - {destination: {host: orders, subset: v2}, weight: 25}
`

// TestMeshEndToEnd: the server and a gateway it configures over xDS route
// real calls to real upstreams registered in the registry: header matches
// and weighted subsets from Istio config applied over the API, a
// deregistered upstream stops receiving calls, and the call log counts
// exactly what was sent.
func TestMeshEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, admin := startMesh(t)
	a1, a2, b1 := startUpstream(t, "v1-a"), startUpstream(t, "v1-b"), startUpstream(t, "v2-a")
	for _, u := range []struct {
		up      *upstream
		version string
	}{{a1, "v1"}, {a2, "v1"}, {b1, "v2"}} {
		if _, err := api.Register(ctx, client.Instance{ID: u.up.name, Service: "orders", Host: "127.0.0.1", Port: u.up.addr.Port,
			Metadata: map[string]string{"version": u.version}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.ApplyConfig(ctx, []byte(meshConfig), false); err != nil {
		t.Fatal(err)
	}
	// The header match reaches v2 only, once the config is through.
	canary := map[string]string{"x-canary": "yes"}
	waitTrue(t, 10*time.Second, func() bool { return tally(t, proxy, 5, canary)["v2-a"] == 5 })
	routed := time.Now() // from here on every call goes to a subset
	if got := tally(t, proxy, 20, canary); got["v2-a"] != 20 {
		t.Fatalf("x-canary: yes reached %v, want v2-a only", got)
	}
	// The weighted default route: about 75% v1 (both instances), 25% v2.
	got := tally(t, proxy, 400, nil)
	v1 := got["v1-a"] + got["v1-b"]
	if v1+got["v2-a"] != 400 || v1 < 240 || v1 > 360 || got["v1-a"] == 0 || got["v1-b"] == 0 {
		t.Fatalf("weighted route 75/25 reached %v", got)
	}
	// A deregistered upstream stops receiving calls.
	if _, err := api.DeregisterOne(ctx, "v1-b"); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 5*time.Second, func() bool { return tally(t, proxy, 20, nil)["v1-b"] == 0 })
	before := a2.calls.Load()
	if got := tally(t, proxy, 100, nil); got["v1-b"] != 0 || a2.calls.Load() != before || got["v1-a"] == 0 {
		t.Fatalf("after deregistering v1-b: %v", got)
	}

	// The call log: exactly the calls sent to v2-a, by counting them here,
	// each naming the subset it was routed to.
	sent := b1.calls.Load()
	var calls struct {
		Calls []struct {
			Endpoint string `json:"endpoint"`
			Subset   string `json:"subset"`
			Status   int    `json:"status"`
		} `json:"calls"`
	}
	waitTrue(t, 5*time.Second, func() bool {
		resp, err := http.Get("http://" + admin + "/v1/calls?service=default/orders&from=0&limit=10000")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		calls.Calls = nil
		if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
			return false
		}
		n := 0
		for _, c := range calls.Calls {
			if c.Endpoint == b1.addr.String() && c.Status == 200 {
				n++
			}
		}
		return int64(n) == sent
	})
	resp, err := http.Get(fmt.Sprintf("http://%s/v1/calls?service=default/orders&from=%d&limit=10000", admin, routed.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	calls.Calls = nil
	if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
		t.Fatal(err)
	}
	subsets := map[string]string{a1.addr.String(): "v1", a2.addr.String(): "v1", b1.addr.String(): "v2"}
	for _, c := range calls.Calls {
		if c.Subset != subsets[c.Endpoint] {
			t.Fatalf("call to %s recorded subset %q, want %q", c.Endpoint, c.Subset, subsets[c.Endpoint])
		}
	}
	if len(calls.Calls) < 500 {
		t.Fatalf("%d calls recorded since the routes settled, want at least 500", len(calls.Calls))
	}
}

// TestMeshWithACLs: with ACLs on, the gateway needs its token to get its
// configuration over xDS, and its admin API answers only callers whose
// token the server accepts for what they read.
func TestMeshWithACLs(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server and gateway with ACLs")
	}
	ctx := context.Background()
	httpAddr, xdsAddr, proxy, admin := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	sctx, stopServer := context.WithCancel(ctx)
	serverDone := make(chan error, 1)
	data, audit := t.TempDir(), filepath.Join(t.TempDir(), "audit.log")
	go func() {
		serverDone <- runServer(sctx, serverFlags{data: data, http: httpAddr, xds: xdsAddr, logFormat: "text",
			logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second, acl: true, auditLog: audit})
	}()
	defer func() { stopServer(); <-serverDone }()
	anon, err := client.New("http://" + httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 10*time.Second, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	var boot struct {
		Secret string `json:"secret"`
	}
	if err := anon.Do(ctx, "POST", "/v1/acl/bootstrap", []byte(`{}`), &boot); err != nil || boot.Secret == "" {
		t.Fatalf("bootstrap: %v", err)
	}
	adm := anon.WithBearer(boot.Secret)
	if _, err := adm.Register(ctx, client.Instance{ID: "u", Service: "orders", Host: "127.0.0.1", Port: startUpstream(t, "u").addr.Port}); err != nil {
		t.Fatal(err)
	}
	// A token that may only read instances of namespace "other".
	if err := adm.Do(ctx, "POST", "/v1/acl/policies", []byte(`{"name":"other-read","rules":[{"namespace":"other","instances":"read"}]}`), nil); err != nil {
		t.Fatal(err)
	}
	var weak struct {
		Secret string `json:"secret"`
	}
	if err := adm.Do(ctx, "POST", "/v1/acl/tokens", []byte(`{"description":"weak","policies":["other-read"]}`), &weak); err != nil {
		t.Fatal(err)
	}

	run := func(token string) (stop func()) {
		gctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- runGateway(gctx, gatewayFlags{xds: xdsAddr, listen: proxy, admin: admin, registry: "http://" + httpAddr,
				token: token, adminACL: true, data: filepath.Join(t.TempDir(), "gw"), node: "acl-gw", service: "sextant-gateway",
				maxBody: 1 << 20, retainAge: time.Hour, retainBytes: 1 << 30, drain: time.Second, logFormat: "text", logLevel: "error"})
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("gateway: %v", err)
			}
		}
	}
	// Without a token the control plane gives the gateway nothing.
	stop := run(weak.Secret)
	waitTrue(t, 10*time.Second, func() bool {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	time.Sleep(300 * time.Millisecond)
	if _, code := get(t, proxy, "orders", "/", nil); code == http.StatusOK {
		t.Fatal("a gateway whose token may not read push config got it")
	}
	stop()
	stop = run(boot.Secret)
	defer stop()
	waitTrue(t, 10*time.Second, func() bool {
		req, _ := http.NewRequest("GET", "http://"+proxy+"/", nil)
		req.Host = "orders"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && string(b) == "u"
	})

	adminGet := func(path, token string) int {
		req, _ := http.NewRequest("GET", "http://"+admin+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200},
		{"/v1/calls?service=default/orders&from=0", "", 401},
		{"/v1/calls?service=default/orders&from=0", "sxt_not_a_token", 401},
		{"/v1/calls?service=default/orders&from=0", weak.Secret, 403},
		{"/v1/calls?service=other/x&from=0", weak.Secret, 200},
		{"/v1/config", weak.Secret, 403},
		{"/v1/calls?service=default/orders&from=0", boot.Secret, 200},
		{"/v1/config", boot.Secret, 200},
	} {
		if got := adminGet(c.path, c.token); got != c.want {
			t.Errorf("GET %s with token %.8q: %d, want %d", c.path, c.token, got, c.want)
		}
	}
}

// TestMeshDeadEndpoint: one of three registered endpoints has nothing
// listening. With the control plane's defaults (Istio's retry policy:
// connect failures retried twice on another host; outlier detection of
// endpoints that cannot be reached), every call succeeds once the gateway
// knows the three endpoints, and the dead one is ejected, as the gateway's
// admin /metrics shows.
func TestMeshDeadEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, admin := startMesh(t)
	a, b := startUpstream(t, "a"), startUpstream(t, "b")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().(*net.TCPAddr)
	ln.Close() // nothing listens there now: connections are refused
	for id, addr := range map[string]*net.TCPAddr{"a": a.addr, "b": b.addr, "dead": dead} {
		if _, err := api.Register(ctx, client.Instance{ID: id, Service: "orders", Host: "127.0.0.1", Port: addr.Port}); err != nil {
			t.Fatal(err)
		}
	}
	series := func(addr *net.TCPAddr) string {
		return fmt.Sprintf(`sextant_gateway_endpoint_ejected{cluster="default/orders",endpoint=%q}`, addr.String())
	}
	metrics := func() string {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	// Warm-up: the gateway routes orders and has its three endpoints (each
	// has its series).
	known := func(addr *net.TCPAddr) string {
		return fmt.Sprintf(`sextant_gateway_endpoint_request_duration_seconds_count{cluster="default/orders",endpoint=%q}`, addr.String())
	}
	waitTrue(t, 10*time.Second, func() bool {
		m := metrics()
		if !strings.Contains(m, known(a.addr)) || !strings.Contains(m, known(b.addr)) || !strings.Contains(m, known(dead)) {
			return false
		}
		_, code := get(t, proxy, "orders", "/", nil)
		return code == http.StatusOK
	})
	got := tally(t, proxy, 90, nil)
	if got["a"]+got["b"] != 90 || got["a"] == 0 || got["b"] == 0 {
		t.Fatalf("with one of three endpoints dead, 90 calls reached %v, want all answered by a and b", got)
	}
	waitTrue(t, 10*time.Second, func() bool { return strings.Contains(metrics(), series(dead)+" 1") })
	m := metrics()
	if !strings.Contains(m, series(a.addr)+" 0") || !strings.Contains(m, series(b.addr)+" 0") {
		t.Fatalf("live endpoints ejected:\n%s", m)
	}
}
