package gateway

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

func nprocs() int { return runtime.NumCPU() }

// fixedRate sends rate calls per second to addr over conns keep-alive
// connections for d, open loop: each connection's goroutine has a schedule
// of send times, and a call's latency counts from its scheduled time, so a
// stall shows up in the percentiles instead of slowing the sender
// (coordinated omission). host, when set, is every call's Host (a
// sidecar's outbound proxy routes by it).
func fixedRate(ctx context.Context, addr, host string, rate float64, conns int, d time.Duration) (LatencyResult, error) {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: conns, NoDefaultUserAgentHeader: true, MaxIdleConnDuration: time.Minute}
	defer hc.CloseIdleConnections()
	interval := time.Duration(float64(conns) / rate * float64(time.Second))
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(d)
	lats := make([][]time.Duration, conns)
	errs := make([]int64, conns)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := fasthttp.AcquireRequest()
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + addr + "/")
			if host != "" {
				req.UseHostHeader = true // else fasthttp writes the URI's host
				req.Header.SetHost(host)
			}
			next := start.Add(time.Duration(i) * interval / time.Duration(conns))
			for next.Before(end) && ctx.Err() == nil {
				if w := time.Until(next); w > 0 {
					time.Sleep(w)
				}
				err := hc.DoTimeout(req, resp, 5*time.Second)
				lat := time.Since(next)
				if err != nil || resp.StatusCode() != 200 {
					errs[i]++
				} else {
					lats[i] = append(lats[i], lat)
				}
				next = next.Add(interval)
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	r := LatencyResult{RatePS: round3(rate)}
	for i := range lats {
		all = append(all, lats[i]...)
		r.Errors += errs[i]
	}
	r.Sent = int64(len(all)) + r.Errors
	slices.Sort(all)
	if len(all) > 0 {
		r.P50Us = float64(all[len(all)/2].Microseconds())
		r.P99Us = float64(all[min(len(all)*99/100, len(all)-1)].Microseconds())
	}
	return r, ctx.Err()
}
