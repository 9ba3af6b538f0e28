package gateway_test

import (
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// BenchmarkProxyFilters is issue 43's figure: calls through the gateway
// over loopback (as BenchmarkProxy: keep-alive, 1 KiB answers, call
// recording on, parallel fasthttp clients) spread over 10 routes, "none"
// without filters, "filters" each route with Istio's header changes (two
// request headers set and added, one removed, one answer header set) and
// a CORS policy, every call an actual request from an allowed origin (the
// answer gets the allow headers). Compare "filters" to "none" of the same
// run (-count to see the spread); cpu-us/op is the process's CPU time
// per call, the steadier figure on a shared machine.
func BenchmarkProxyFilters(b *testing.B) {
	for _, mode := range []struct {
		name    string
		filters bool
	}{{"none", false}, {"filters", true}} {
		b.Run(mode.name, func(b *testing.B) { benchProxyRoutes(b, mode.filters) })
	}
}

// filterRoutes is 10 routes /r0 .. /r9 to cluster u, with header changes
// and CORS when filters is set.
func filterRoutes(filters bool) *route.RouteConfiguration {
	var routes []*route.Route
	for i := range 10 {
		r := prefixRoute(fmt.Sprintf("/r%d", i), "u")
		if filters {
			r.RequestHeadersToAdd = []*core.HeaderValueOption{
				{Header: &core.HeaderValue{Key: "x-tenant", Value: "t1"}, AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
				{Header: &core.HeaderValue{Key: "x-route", Value: fmt.Sprint(i)}, AppendAction: core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
			}
			r.RequestHeadersToRemove = []string{"x-debug"}
			r.ResponseHeadersToAdd = []*core.HeaderValueOption{
				{Header: &core.HeaderValue{Key: "x-served-by", Value: "gw"}, AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			}
			cors, _ := anypb.New(&corsv3.CorsPolicy{AllowOriginStringMatch: []*matcher.StringMatcher{
				{MatchPattern: &matcher.StringMatcher_Exact{Exact: "https://shop.example"}}},
				AllowMethods: "GET,POST", ExposeHeaders: "x-trace", MaxAge: "600"})
			r.TypedPerFilterConfig = map[string]*anypb.Any{"envoy.filters.http.cors": cors}
		}
		routes = append(routes, r)
	}
	return routeConfig("r", vhost("all", []string{"*"}, routes...))
}

// The answer headers benchProxyRoutes checks, canonical.
var allowOriginName, servedByName = []byte("Access-Control-Allow-Origin"), []byte("X-Served-By")

func benchProxyRoutes(b *testing.B, filters bool) {
	body := make([]byte, 1024)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(body) }}
	go up.Serve(ln)
	defer up.Shutdown()
	tcp := ln.Addr().(*net.TCPAddr)
	u := &upstream{name: "fast", host: tcp.IP.String(), port: uint32(tcp.Port)}

	cp := startControlPlaneB(b)
	cp.set(rdsListener("gw", "r"), filterRoutes(filters), edsCluster("u"), assignment("u", ep{u: u}))
	g := startGatewayWith(b, cp.addr, gateway.Options{})
	addr := g.url[len("http://"):]
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: 256}
	call := func(req *fasthttp.Request, resp *fasthttp.Response, i int) bool {
		req.SetRequestURI(fmt.Sprintf("http://%s/r%d/items", addr, i%10))
		req.Header.Set("Origin", "https://shop.example")
		if err := hc.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			return false
		}
		// The filters ran: the answer carries what they add. (By the names
		// as the client keeps them, canonical: a Peek by string re-cases
		// the name each call, client work of this mode alone, ~1% of a
		// call in cachegrind.)
		return !filters || (string(resp.Header.PeekCanonical(allowOriginName)) == "https://shop.example" &&
			string(resp.Header.PeekCanonical(servedByName)) == "gw")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		ok := call(req, resp, 9)
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("gateway got no config")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var next atomic.Int64
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			if !call(req, resp, int(next.Add(1))) {
				b.Errorf("call: %d %s", resp.StatusCode(), resp.Header.String())
				return
			}
		}
	})
	b.StopTimer()
	// CPU time of the whole process (client, gateway, upstream) per call:
	// steadier than ns/op on a shared machine.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	hc.CloseIdleConnections()
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
