package gateway_test

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkProxy is one call through the gateway over loopback (client ->
// gateway -> upstream, keep-alive, 1 KB answers, call recording on),
// measured from a fasthttp client; parallel with GOMAXPROCS clients. Socket
// syscalls dominate it (docs/gateway.md); allocs/op is the gateway's and the
// client's.
func BenchmarkProxy(b *testing.B) {
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
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "u"))),
		edsCluster("u"), assignment("u", ep{u: u}))
	g := startGatewayB(b, cp.addr)
	addr := g.url[len("http://"):]
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: 256}
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + addr + "/")
		err := hc.Do(req, resp)
		ok := err == nil && resp.StatusCode() == 200
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
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + addr + "/")
		for pb.Next() {
			if err := hc.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("call: %v %d", err, resp.StatusCode())
				return
			}
		}
	})
	b.StopTimer()
	hc.CloseIdleConnections()
}
