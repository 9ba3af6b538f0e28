package client

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// serverRequests sums sextant_http_requests_total from the server's
// /metrics: every request the server has answered, by route.
func serverRequests(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "sextant_http_requests_total{") {
			continue
		}
		i := strings.Index(line, `route="`)
		j := strings.LastIndexByte(line, ' ')
		if i < 0 || j < 0 {
			continue
		}
		route := line[i+len(`route="`):]
		route = route[:strings.IndexByte(route, '"')]
		v, err := strconv.ParseFloat(line[j+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[route] += v
	}
	return out
}

type heartbeatCost struct {
	registrations    int
	ttl, window      time.Duration
	requestsPerS     float64 // every request the server answered in the window
	heartbeatsPerS   float64 // of which POST /v1/heartbeats
	idsPerHeartbeat  float64
	registerDuration time.Duration
}

// measureHeartbeatCost keeps n registrations of one Client alive against a
// real server and counts, from the server's own metrics, the requests it
// answers per second once every registration is in its steady state.
func measureHeartbeatCost(t *testing.T, n int, ttl, window time.Duration) heartbeatCost {
	st, c, ct := stackClient(t)
	regs := make([]*Registration, n)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	const workers = 64 // concurrent registers share the store's group commit
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				r, err := c.Keepalive(context.Background(), Instance{ID: fmt.Sprintf("ka-%06d", i), Service: "keepalive",
					Host: "10.1.0.1", Port: 1 + i%65535}, ttl)
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				regs[i] = r
			}
		}()
	}
	wg.Wait()
	registered := time.Since(start)
	defer func() {
		for _, r := range regs {
			if r != nil {
				r.Close()
			}
		}
	}()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	// Steady state: every registration has heartbeated at least once.
	time.Sleep(time.Duration(float64(ttl) * HeartbeatFraction))
	before, hbBefore := serverRequests(t, st.URL()), ct.count("POST /v1/heartbeats")
	time.Sleep(window)
	after, hbAfter := serverRequests(t, st.URL()), ct.count("POST /v1/heartbeats")
	total, beats := 0.0, after["POST /v1/heartbeats"]-before["POST /v1/heartbeats"]
	for route, v := range after {
		if route != "GET /metrics" {
			total += v - before[route]
		}
	}
	// The two counters are read one after the other while heartbeats go
	// on: a request in flight at either reading is counted by one side
	// only. At most one batch is in flight per reading.
	if d := int(beats) - (hbAfter - hbBefore); d < -2 || d > 2 {
		t.Errorf("server counted %v heartbeat requests, the client sent %d", beats, hbAfter-hbBefore)
	}
	return heartbeatCost{
		registrations: n, ttl: ttl, window: window,
		requestsPerS:     total / window.Seconds(),
		heartbeatsPerS:   beats / window.Seconds(),
		idsPerHeartbeat:  float64(n) * window.Seconds() / (ttl.Seconds() * HeartbeatFraction) / max(beats, 1),
		registerDuration: registered,
	}
}

// TestKeepaliveHeartbeatCost: 1,000 registrations with a 1s TTL cost the
// server a few requests per heartbeat interval, not one per registration.
// With SEXTANT_FIGURES=1 it also measures the figure of docs/benchmarks.md:
// 10,000 registrations at a 10s TTL over 30s.
func TestKeepaliveHeartbeatCost(t *testing.T) {
	got := measureHeartbeatCost(t, 1000, time.Second, 2*time.Second)
	perInterval := got.requestsPerS * got.ttl.Seconds() * HeartbeatFraction
	t.Logf("%d registrations, ttl %v: %.1f requests/s (%.1f per heartbeat interval, ~%.0f ids per heartbeat)",
		got.registrations, got.ttl, got.requestsPerS, perInterval, got.idsPerHeartbeat)
	if perInterval > 6 || got.heartbeatsPerS == 0 {
		t.Errorf("%.1f requests per heartbeat interval for %d registrations, want a few batched ones", perInterval, got.registrations)
	}
	if os.Getenv("SEXTANT_FIGURES") == "" {
		return
	}
	fig := measureHeartbeatCost(t, 10000, 10*time.Second, 30*time.Second)
	fmt.Printf(`{"scenario":"keepalive_10000_ttl_10s","registrations":%d,"ttl_s":%v,"window_s":%v,"server_requests_per_s":%.3f,"heartbeat_requests_per_s":%.3f,"ids_per_heartbeat":%.0f,"register_all_s":%.2f,"target_requests_per_s":10}`+"\n",
		fig.registrations, fig.ttl.Seconds(), fig.window.Seconds(), fig.requestsPerS, fig.heartbeatsPerS, fig.idsPerHeartbeat, fig.registerDuration.Seconds())
	if fig.requestsPerS > 10 {
		t.Errorf("10,000 registrations at a 10s TTL cost %.2f requests/s, target <= 10", fig.requestsPerS)
	}
}
