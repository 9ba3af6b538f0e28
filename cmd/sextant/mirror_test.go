package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// mirrorTaskConfig is Istio's mirroring task: all of httpbin's traffic to
// v1, and a copy of each call to v2.
const mirrorTaskConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: httpbin}
spec:
  host: httpbin
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: httpbin}
spec:
  hosts: [httpbin]
  http:
  - route:
    - destination: {host: httpbin, subset: v1}
      weight: 100
    mirror:
      host: httpbin
      subset: v2
    mirrorPercentage:
      value: 100.0
`

// TestIstioMirroringTask: Istio's mirroring task through the real server
// and gateway. Every call is answered by v1; v2 gets a copy of each, with
// "-shadow" after the host as Envoy sends it, and its answers are ignored:
// v2 holds every copy unanswered until the client's calls are all done
// (they did not wait for it), then answers 500, which no client sees.
func TestIstioMirroringTask(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, admin := startMesh(t)
	v1, v1Calls := startEcho(t, "httpbin-v1")

	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var (
		mu      sync.Mutex
		copies  []string // the Host of each copy v2 got
		copyArr atomic.Int64
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.Host, "-shadow") {
			// A call balanced here before the rule was in force (v2 is an
			// instance of httpbin too): not a copy, and not held.
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "httpbin-v2 called before the rule")
			return
		}
		mu.Lock()
		copies = append(copies, r.Host+" "+r.URL.Path)
		mu.Unlock()
		copyArr.Add(1)
		<-release
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "httpbin-v2 must not be seen")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	v2 := ln.Addr().(*net.TCPAddr)

	for _, in := range []client.Instance{
		{ID: "httpbin-v1", Service: "httpbin", Host: "127.0.0.1", Port: v1.Port, Metadata: map[string]string{"version": "v1"}},
		{ID: "httpbin-v2", Service: "httpbin", Host: "127.0.0.1", Port: v2.Port, Metadata: map[string]string{"version": "v2"}},
	} {
		if _, err := api.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.ApplyConfig(ctx, []byte(mirrorTaskConfig), false); err != nil {
		t.Fatal(err)
	}
	// The config is through once a call gives v2 a copy.
	waitTrue(t, 15*time.Second, func() bool {
		status, body, _ := gwCall(t, proxy, "httpbin", "/headers", nil)
		if status == 200 && !strings.HasPrefix(body, "httpbin-v1") {
			t.Fatalf("got %d %q; want v1's answer", status, body)
		}
		return copyArr.Load() > 0
	})
	before, v1Before := copyArr.Load(), v1Calls.Load()
	// A copy made while the mirror cluster had no endpoint yet was dropped
	// (counted); from here on none may be.
	failed0, dropped0 := metricValue(t, admin, "sextant_gateway_mirror_failed_total"), metricValue(t, admin, "sextant_gateway_mirror_dropped_total")
	const n = 20
	for i := range n {
		status, body, _ := gwCall(t, proxy, "httpbin", fmt.Sprintf("/status/%d", i), nil)
		if status != 200 || !strings.HasPrefix(body, "httpbin-v1") {
			t.Fatalf("call %d: got %d %q; want v1's answer (the copy's is ignored)", i, status, body)
		}
	}
	if got := v1Calls.Load() - v1Before; got != n {
		t.Fatalf("v1 got %d calls, want %d", got, n)
	}
	// The copies are on their way while v2 holds them: the calls did not wait.
	for deadline := time.Now().Add(20 * time.Second); copyArr.Load()-before < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			mu.Lock()
			got := copies[before:]
			mu.Unlock()
			t.Fatalf("%d of %d copies reached v2 in 20 s: %q; the gateway's copies: sent %v, failed %v, dropped %v", len(got), n, got,
				metricValue(t, admin, "sextant_gateway_mirror_sent_total"), metricValue(t, admin, "sextant_gateway_mirror_failed_total"),
				metricValue(t, admin, "sextant_gateway_mirror_dropped_total"))
		}
	}
	once.Do(func() { close(release) })
	// Released, every copy is answered (500, which nobody sees) and
	// counted so; none of the 20 failed or was dropped.
	held := copyArr.Load()
	waitTrue(t, 10*time.Second, func() bool { return metricValue(t, admin, "sextant_gateway_mirror_sent_total") >= float64(held) })
	if f, d := metricValue(t, admin, "sextant_gateway_mirror_failed_total"), metricValue(t, admin, "sextant_gateway_mirror_dropped_total"); f != failed0 || d != dropped0 {
		t.Errorf("copies failed %v, dropped %v during the calls; want none", f-failed0, d-dropped0)
	}
	mu.Lock()
	defer mu.Unlock()
	got := map[string]bool{}
	for _, c := range copies[before:] {
		got[c] = true
	}
	for i := range n {
		if want := fmt.Sprintf("httpbin-shadow /status/%d", i); !got[want] {
			t.Errorf("no copy %q (Host httpbin-shadow, the call's path) among %q", want, copies[before:])
		}
	}
	if c := copies[0]; c != "httpbin-shadow /headers" {
		t.Errorf("first copy: got %q; want Host httpbin-shadow", c)
	}
}
