package gateway

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// ConfigResult is how long a new route takes to serve after the control
// plane publishes it.
type ConfigResult struct {
	Scenario string     `json:"scenario"`
	Updates  int        `json:"updates"`
	P50Ms    float64    `json:"p50_ms"`
	P99Ms    float64    `json:"p99_ms"`
	MaxMs    float64    `json:"max_ms"`
	LoadAvg  [3]float64 `json:"load_avg"`
}

// RunConfigLatency publishes n route changes through go-control-plane's ADS
// server to an in-process gateway and measures, for each, the time from
// SetSnapshot to the first call on the new route answered by the upstream
// (probing every 200 µs). It bounds the xDS half of "config apply -> the
// new route serves"; Sextant's own control plane adds its translation.
func RunConfigLatency(ctx context.Context, n int) (*ConfigResult, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	uctx, stopUp := context.WithCancel(ctx)
	defer stopUp()
	go func() { _ = ServeUpstream(uctx, ln, 16) }()
	up := ln.Addr().String()

	cp, err := startControlPlane()
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	pc := proxyConfig{policy: "round_robin", endpoints: []string{up}, timeout: time.Second, prefix: "/v0/"}
	if err := cp.set(pc); err != nil {
		return nil, err
	}
	g, err := attach(cp)
	if err != nil {
		return nil, err
	}
	defer g.stop()
	hc := &fasthttp.HostClient{Addr: g.addr, MaxConns: 4}
	defer hc.CloseIdleConnections()
	serves := func(path string) bool {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + g.addr + path)
		return hc.DoTimeout(req, resp, time.Second) == nil && resp.StatusCode() == 200
	}
	deadline := time.Now().Add(10 * time.Second)
	for !serves("/v0/") {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench: gateway got no config")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var lats []time.Duration
	for i := 1; i <= n && ctx.Err() == nil; i++ {
		pc.prefix = "/v" + strconv.Itoa(i) + "/"
		start := time.Now()
		if err := cp.set(pc); err != nil {
			return nil, err
		}
		for !serves(pc.prefix) {
			if time.Since(start) > 10*time.Second {
				return nil, fmt.Errorf("bench: route %s did not serve in 10s", pc.prefix)
			}
			time.Sleep(200 * time.Microsecond)
		}
		lats = append(lats, time.Since(start))
	}
	slices.Sort(lats)
	ms := func(d time.Duration) float64 { return round3(float64(d.Microseconds()) / 1000) }
	return &ConfigResult{Scenario: "config_push_to_serve", Updates: len(lats), P50Ms: ms(lats[len(lats)/2]),
		P99Ms: ms(lats[min(len(lats)*99/100, len(lats)-1)]), MaxMs: ms(lats[len(lats)-1]), LoadAvg: report.LoadAvg()}, nil
}
