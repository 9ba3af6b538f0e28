package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// circuitTaskConfig is the DestinationRule of Istio's circuit-breaking
// task (https://istio.io/latest/docs/tasks/traffic-management/circuit-breaking/),
// as written there.
const circuitTaskConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: httpbin
spec:
  host: httpbin
  trafficPolicy:
    connectionPool:
      tcp:
        maxConnections: 1
      http:
        http1MaxPendingRequests: 1
        maxRequestsPerConnection: 1
    outlierDetection:
      consecutive5xxErrors: 1
      interval: 1s
      baseEjectionTime: 3m
      maxEjectionPercent: 100
`

// startHeld runs an httpbin stand-in whose answers wait for hold (closed:
// answer at once) and then delay; it counts the requests it saw, the ones
// in progress, and the connections it accepted.
func startHeld(t *testing.T, delay time.Duration) (addr *net.TCPAddr, hold chan struct{}, inside, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hold = make(chan struct{})
	inside, conns = new(atomic.Int64), new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		defer inside.Add(-1)
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
		time.Sleep(delay)
		io.WriteString(w, "httpbin")
	}), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr), hold, inside, conns
}

// counter reads a counter of the gateway's /metrics, 0 when absent.
func counter(t *testing.T, admin, series string) float64 {
	return max(0, metricValue(t, admin, series))
}

// fortio sends n calls over c connections (each a client of its own
// sending n/c calls one at a time, as fortio -c C -n N -qps 0) and counts
// the answers by status, checking that every 503 says it overflowed.
func fortio(t *testing.T, proxy string, c, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
			defer cl.CloseIdleConnections()
			for range n / c {
				req, _ := http.NewRequest("GET", "http://"+proxy+"/get", nil)
				req.Host = "httpbin"
				resp, err := cl.Do(req)
				if err != nil {
					t.Errorf("call: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
				if resp.StatusCode == 503 && resp.Header.Get("X-Envoy-Overloaded") != "true" {
					t.Errorf("503 without x-envoy-overloaded: %v", resp.Header)
				}
			}
		}()
	}
	wg.Wait()
	return codes
}

// TestIstioCircuitBreakingTask: Istio's circuit-breaking task through the
// real server and gateway. With the task's DestinationRule (one
// connection, one pending request, one request per connection): a third
// call while one is in flight and one waits is answered 503 with
// x-envoy-overloaded at once, recorded as pool_overflow (Envoy's UO) and
// counted as upstream_rq_pending_overflow; fortio's load over 3
// connections gets some 503s, each counted; over one connection none.
func TestIstioCircuitBreakingTask(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, admin := startMesh(t)
	addr, hold, inside, conns := startHeld(t, 0)
	if _, err := api.Register(ctx, client.Instance{ID: "httpbin-1", Service: "httpbin", Host: "127.0.0.1", Port: addr.Port}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ApplyConfig(ctx, []byte(circuitTaskConfig), false); err != nil {
		t.Fatal(err)
	}
	const overflowed = `sextant_gateway_circuit_overflow_total{cluster="default/httpbin",kind="upstream_rq_pending_overflow"}`
	const waited = `sextant_gateway_circuit_overflow_total{cluster="default/httpbin",kind="upstream_cx_overflow"}`
	// The rule is in force once the gateway holds the thresholds: a call
	// waits (upstream_cx_overflow) behind one in flight.
	type answer struct {
		code int
		h    http.Header
	}
	send := func() chan answer {
		ch := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequest("GET", "http://"+proxy+"/get", nil)
			req.Host = "httpbin"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				ch <- answer{}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ch <- answer{resp.StatusCode, resp.Header}
		}()
		return ch
	}
	// reached waits until n calls are at the upstream; false, the answer
	// taken, when ch's call is answered first (it never got there: the
	// gateway has no endpoint yet on a loaded machine).
	reached := func(n int64, ch chan answer) bool {
		for inside.Load() < n {
			select {
			case <-ch:
				return false
			case <-time.After(time.Millisecond):
			}
		}
		return true
	}
	// release lets held calls go until ch's is answered: a send on hold
	// may free the other held call first, and a call whose request the
	// gateway gave up on (its handler gone) is answered without one. (One
	// send per call deadlocked when it freed the wrong one.)
	release := func(ch chan answer) {
		for {
			select {
			case hold <- struct{}{}:
			case <-ch:
				return
			}
		}
	}
	var first, second chan answer
	waitTrue(t, 60*time.Second, func() bool {
		first = send()
		if !reached(1, first) {
			return false
		}
		w0 := counter(t, admin, waited)
		second = send()
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if counter(t, admin, waited) > w0 {
				return true // second waits for the connection
			}
			if inside.Load() > 1 {
				break // no limit yet: both reached the upstream
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Not in force yet: let both through and try again.
		if reached(2, second) {
			release(second)
		}
		release(first)
		return false
	})
	// One in flight, one pending: the third overflows at once.
	third := <-send()
	if third.code != 503 || third.h.Get("X-Envoy-Overloaded") != "true" || third.h.Get("X-Sextant-Error") != "pool_overflow" {
		t.Fatalf("third call: %d %v, want 503 with x-envoy-overloaded", third.code, third.h)
	}
	if n := counter(t, admin, overflowed); n != 1 {
		t.Fatalf("upstream_rq_pending_overflow %v, want 1", n)
	}
	if n := inside.Load(); n != 1 {
		t.Fatalf("%d calls at the upstream, want 1 (max_connections 1)", n)
	}
	close(hold) // from now on the upstream answers at once
	for _, ch := range []chan answer{first, second} {
		if a := <-ch; a.code != 200 {
			t.Fatalf("held call: %d", a.code)
		}
	}
	// The overflow is in the call log as pool_overflow, Envoy's UO.
	waitTrue(t, 10*time.Second, func() bool {
		var got struct {
			Calls []struct {
				Status int    `json:"status"`
				Reason string `json:"reason"`
			} `json:"calls"`
		}
		resp, err := http.Get("http://" + admin + "/v1/calls?service=default/httpbin&reason=pool_overflow&from=0")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&got) == nil && len(got.Calls) == 1 && got.Calls[0].Status == 503
	})

	// One request per connection: every call had a connection of its own.
	c0 := conns.Load()
	codes := fortio(t, proxy, 1, 20)
	if codes[200] != 20 {
		t.Fatalf("one connection, 20 calls: %v, want 20 x 200", codes)
	}
	if n := conns.Load() - c0; n != 20 {
		t.Errorf("20 calls opened %d upstream connections, want 20 (maxRequestsPerConnection 1)", n)
	}
	if n := counter(t, admin, overflowed); n != 1 {
		t.Fatalf("upstream_rq_pending_overflow %v after one connection's calls, want still 1", n)
	}

	// The task's loads: 2 connections x 20 calls, then 3 x 30. The 503s
	// of each are counted, and three connections (one more than a
	// connection and a pending slot hold) overflow. A slower answer keeps
	// the calls together on a loaded machine.
	before := counter(t, admin, overflowed)
	two := fortio(t, proxy, 2, 20)
	t.Logf("fortio -c 2 -n 20: %v", two)
	after := counter(t, admin, overflowed)
	if two[200]+two[503] != 20 || float64(two[503]) != after-before {
		t.Fatalf("2 connections: %v, overflow counted %v", two, after-before)
	}
	slow, slowHold, _, slowConns := startHeld(t, 20*time.Millisecond)
	close(slowHold)
	if _, err := api.Register(ctx, client.Instance{ID: "httpbin-1", Service: "httpbin", Host: "127.0.0.1", Port: slow.Port}); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 10*time.Second, func() bool { return fortio(t, proxy, 1, 1)[200] == 1 && slowConns.Load() > 0 })
	for round := 0; ; round++ {
		before = counter(t, admin, overflowed)
		three := fortio(t, proxy, 3, 30)
		after = counter(t, admin, overflowed)
		t.Logf("fortio -c 3 -n 30: %v (upstream_rq_pending_overflow +%v)", three, after-before)
		if three[200]+three[503] != 30 || float64(three[503]) != after-before {
			t.Fatalf("3 connections: %v, overflow counted %v", three, after-before)
		}
		if three[503] > 0 {
			break
		}
		if round == 4 {
			t.Fatalf("3 connections x 30 calls, 5 times: no overflow")
		}
	}
}
