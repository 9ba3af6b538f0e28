package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// chainRouting routes shop.example.com to service a and b.example.com to
// service b through one Gateway, each route retrying a 5xx once.
const chainRouting = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: chain-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: http, protocol: HTTP}
    hosts: [shop.example.com, b.example.com]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a}
spec:
  hosts: [shop.example.com]
  gateways: [chain-gw]
  http:
  - route: [{destination: {host: a}}]
    retries: {attempts: 2, retryOn: 5xx}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: b}
spec:
  hosts: [b.example.com]
  gateways: [chain-gw]
  http:
  - route: [{destination: {host: b}}]
    retries: {attempts: 2, retryOn: 5xx}
`

// TestTracingJaegerChain: a call client -> gateway -> service a -> gateway
// -> service b, where a passes the trace headers on as Istio asks services
// to and b fails its first try, is one trace in a real Jaeger: the
// gateway's server span for a under the caller's span, a's try under it,
// the server span for b under that try (a sent its context), and b's two
// tries (503, then 200) under that server span.
func TestTracingJaegerChain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Jaeger")
	}
	j := startJaeger(t)
	api, proxy, _, server := startMeshWith(t, "", 10*time.Second, func(f *gatewayFlags, _ string) {
		f.tracingEndpoint, f.tracingProtocol, f.tracingSampling = j.otlpGRPC, "grpc", 0
		f.tracingService = "chain-gateway"
	})
	var bFailFirst atomic.Bool
	b := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bFailFirst.CompareAndSwap(true, false) {
			http.Error(w, "first try fails", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "b")
	}))
	a := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET", "http://"+proxy+"/stock", nil)
		req.Host = "b.example.com"
		for _, h := range []string{"Traceparent", "Tracestate"} { // as Istio requires of services
			if v := r.Header.Get(h); v != "" {
				req.Header.Set(h, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		w.WriteHeader(resp.StatusCode)
		fmt.Fprintf(w, "a+%s", body)
	}))
	for name, port := range map[string]int{"a": a, "b": b} {
		if _, err := api.Register(context.Background(), client.Instance{ID: name + "1", Service: name, Host: "127.0.0.1", Port: port}); err != nil {
			t.Fatal(err)
		}
	}
	_, p, _ := net.SplitHostPort(proxy)
	var gwPort int
	fmt.Sscan(p, &gwPort)
	if out, err := runOn(t, server, fmt.Sprintf(chainRouting, gwPort), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool { code, _ := shopCall(proxy, nil); return code == 200 })

	const caller = "00f067aa0ba902b7"
	tid := newHexID(16)
	bFailFirst.Store(true)
	if code, err := shopCall(proxy, map[string]string{"traceparent": "00-" + tid + "-" + caller + "-01"}); err != nil || code != 200 {
		t.Fatalf("traced call: %d %v", code, err)
	}
	spans, _ := j.trace(t, tid, 5)
	if len(spans) != 5 {
		t.Fatalf("%d spans, want 5 (two server spans, a's try, b's two tries): %+v", len(spans), spans)
	}
	byParent := map[string][]*jaegerSpan{}
	for i := range spans {
		byParent[spans[i].parent()] = append(byParent[spans[i].parent()], &spans[i])
	}
	one := func(parent, kind, what string) *jaegerSpan {
		t.Helper()
		l := byParent[parent]
		if len(l) != 1 || l[0].tag("span.kind") != kind {
			t.Fatalf("%s: want one %s span under %s, got %+v", what, kind, parent, l)
		}
		return l[0]
	}
	srvA := one(caller, "server", "the gateway's span for a")
	tryA := one(srvA.SpanID, "client", "the try to a")
	srvB := one(tryA.SpanID, "server", "the gateway's span for b, under a's try (a passed its context on)")
	if srvA.tag("http.url") != "http://shop.example.com/buy?item=7" || srvB.tag("http.url") != "http://b.example.com/stock" {
		t.Errorf("server spans' urls: %q, %q", srvA.tag("http.url"), srvB.tag("http.url"))
	}
	tries := byParent[srvB.SpanID]
	if len(tries) != 2 {
		t.Fatalf("b's tries: %+v, want 2", tries)
	}
	codes := map[string]string{}
	for _, s := range tries {
		codes[s.tag("retry.attempt")] = s.tag("http.status_code")
	}
	if codes["0"] != "503" || codes["1"] != "200" || srvB.tag("retries") != "1" {
		t.Errorf("b's tries by attempt %v (want 0: 503, 1: 200), server span retries %q", codes, srvB.tag("retries"))
	}
}

// serveHTTP serves h on a loopback port until the test ends and returns
// the port.
func serveHTTP(t *testing.T, h http.Handler) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}
