package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// startEcho runs an upstream that answers with the request headers it
// got (x-route, x-gone, x-version) and a header of its own (X-Internal).
func startEcho(t *testing.T, name string) (*net.TCPAddr, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("X-Internal", "secret")
		fmt.Fprintf(w, "%s x-route=%s x-gone=%s x-version=%s", name, r.Header.Get("X-Route"), r.Header.Get("X-Gone"), r.Header.Get("X-Version"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr), &calls
}

// gwCall sends GET path to the gateway for host with headers.
func gwCall(t *testing.T, proxy, host, path string, headers map[string]string) (int, string, http.Header) {
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
	return resp.StatusCode, string(b), resp.Header
}

// faultTaskConfig is Istio's fault-injection task for ratings (a delay
// for end-user jason, 7 s there, 1 s here; a 100% abort 500 for another
// user), with a direct response and header changes on the route and its
// destination.
const faultTaskConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings}
spec:
  host: ratings
  subsets:
  - {name: v1, labels: {version: v1}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - match:
    - headers:
        end-user:
          exact: jason
    fault:
      delay:
        percentage:
          value: 100.0
        fixedDelay: 1s
    route:
    - destination: {host: ratings, subset: v1}
  - match:
    - headers:
        end-user:
          exact: abort
    fault:
      abort:
        percentage:
          value: 100.0
        httpStatus: 500
    route:
    - destination: {host: ratings, subset: v1}
  - match: [{uri: {exact: /health}}]
    directResponse:
      status: 200
      body: {string: "ratings ok"}
  - headers:
      request:
        set: {x-route: ratings}
        remove: [x-gone]
      response:
        set: {x-served: sextant}
        remove: [x-internal]
    route:
    - destination: {host: ratings, subset: v1}
      headers:
        request:
          set: {x-version: v1}
`

// TestIstioFaultInjectionTask: Istio's fault-injection task through the
// real server and gateway: the delayed user's call takes at least the
// delay and is answered, the aborted user's gets 500 without reaching the
// upstream and is in the call log; a directResponse is answered by the gateway; header changes
// of the route and its destination are seen by the upstream and the
// client.
func TestIstioFaultInjectionTask(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, admin := startMesh(t)
	addr, calls := startEcho(t, "ratings-v1")
	if _, err := api.Register(ctx, client.Instance{ID: "ratings-v1", Service: "ratings", Host: "127.0.0.1", Port: addr.Port,
		Metadata: map[string]string{"version": "v1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ApplyConfig(ctx, []byte(faultTaskConfig), false); err != nil {
		t.Fatal(err)
	}
	// The config is through once the default route's headers show.
	waitTrue(t, 10*time.Second, func() bool {
		_, _, h := gwCall(t, proxy, "ratings", "/ratings/0", nil)
		return h.Get("X-Served") == "sextant"
	})

	code, body, h := gwCall(t, proxy, "ratings", "/ratings/0", map[string]string{"X-Gone": "please", "X-Route": "client"})
	if code != 200 || body != "ratings-v1 x-route=ratings x-gone= x-version=v1" || h.Get("X-Internal") != "" {
		t.Fatalf("headers: %d %q %v", code, body, h)
	}

	t0 := time.Now()
	code, body, _ = gwCall(t, proxy, "ratings", "/ratings/0", map[string]string{"end-user": "jason"})
	if took := time.Since(t0); code != 200 || !strings.HasPrefix(body, "ratings-v1") || took < time.Second {
		t.Fatalf("delayed user: %d %q after %v, want an answer after at least 1s", code, body, took)
	}

	before := calls.Load()
	for range 10 {
		code, body, _ := gwCall(t, proxy, "ratings", "/ratings/0", map[string]string{"end-user": "abort"})
		if code != 500 || body != "fault filter abort" {
			t.Fatalf("aborted user: %d %q, want 500 fault filter abort", code, body)
		}
	}
	if n := calls.Load() - before; n != 0 {
		t.Fatalf("aborted calls reached the upstream %d times", n)
	}
	// The aborted calls are in the call log, with their reason.
	waitTrue(t, 5*time.Second, func() bool {
		var got struct {
			Calls []struct {
				Status int    `json:"status"`
				Reason string `json:"reason"`
			} `json:"calls"`
		}
		resp, err := http.Get("http://" + admin + "/v1/calls?service=default/ratings&reason=fault_abort&from=0")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&got) != nil || len(got.Calls) != 10 {
			return false
		}
		for _, c := range got.Calls {
			if c.Status != 500 || c.Reason != "fault_abort" {
				return false
			}
		}
		return true
	})

	if code, body, _ := gwCall(t, proxy, "ratings", "/health", nil); code != 200 || body != "ratings ok" {
		t.Fatalf("direct response: %d %q", code, body)
	}
}
