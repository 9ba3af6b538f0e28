package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// timeoutTaskConfig is Istio's request-timeouts task
// (https://istio.io/latest/docs/tasks/traffic-management/request-timeouts/):
// reviews routed to v2, which calls ratings, whose calls are delayed 2 s;
// %s is the reviews route's timeout line (none at first, then 0.5 s).
const timeoutTaskConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews}
spec:
  host: reviews
  subsets:
  - {name: v2, labels: {version: v2}}
---
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
metadata:
  name: ratings
spec:
  hosts:
  - ratings
  http:
  - fault:
      delay:
        percentage:
          value: 100
        fixedDelay: 2s
    route:
    - destination:
        host: ratings
        subset: v1
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts:
  - reviews
  http:
  - route:
    - destination:
        host: reviews
        subset: v2
%s`

// startReviews runs reviews v2: it calls ratings through the gateway, as
// Bookinfo's reviews calls ratings through its sidecar.
func startReviews(t *testing.T, proxy string) *net.TCPAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET", "http://"+proxy+"/ratings/0", nil)
		req.Host = "ratings"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, "ratings: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(w, "reviews-v2 with %s", b)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr)
}

// TestIstioRequestTimeoutsTask: Istio's request-timeouts task through the
// real server and gateway. With ratings delayed 2 s, reviews answers after
// at least 2 s; with the reviews route's timeout of 0.5 s the gateway
// answers 504 upstream_timeout after about half a second, without waiting
// for ratings.
func TestIstioRequestTimeoutsTask(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, _ := startMesh(t)
	ratings, _ := startEcho(t, "ratings-v1")
	reviews := startReviews(t, proxy)
	for _, in := range []client.Instance{
		{ID: "ratings-v1", Service: "ratings", Host: "127.0.0.1", Port: ratings.Port, Metadata: map[string]string{"version": "v1"}},
		{ID: "reviews-v2", Service: "reviews", Host: "127.0.0.1", Port: reviews.Port, Metadata: map[string]string{"version": "v2"}},
	} {
		if _, err := api.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.ApplyConfig(ctx, []byte(fmt.Sprintf(timeoutTaskConfig, "")), false); err != nil {
		t.Fatal(err)
	}
	// The delay is in force once a call to ratings takes 2 s; reviews then
	// takes as long, and answers.
	waitTrue(t, 20*time.Second, func() bool {
		t0 := time.Now()
		code, _, _ := gwCall(t, proxy, "ratings", "/ratings/0", nil)
		return code == 200 && time.Since(t0) >= 2*time.Second
	})
	t0 := time.Now()
	code, body, _ := gwCall(t, proxy, "reviews", "/reviews/0", nil)
	if took := time.Since(t0); code != 200 || !strings.HasPrefix(body, "reviews-v2 with ratings-v1") || took < 2*time.Second {
		t.Fatalf("reviews without a timeout: %d %q after %v, want its answer after at least 2s", code, body, took)
	}

	if _, err := api.ApplyConfig(ctx, []byte(fmt.Sprintf(timeoutTaskConfig, "    timeout: 0.5s\n")), false); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 20*time.Second, func() bool {
		t0 := time.Now()
		code, _, h := gwCall(t, proxy, "reviews", "/reviews/0", nil)
		took := time.Since(t0)
		if code != 504 {
			return false
		}
		if h.Get("X-Sextant-Error") != "upstream_timeout" || took < 500*time.Millisecond {
			t.Fatalf("reviews with timeout 0.5s: 504 %q after %v, want upstream_timeout after at least 0.5s", h.Get("X-Sextant-Error"), took)
		}
		return true
	})
}
