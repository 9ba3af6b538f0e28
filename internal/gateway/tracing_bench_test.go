package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/trace"
)

// BenchmarkProxyTracing is BenchmarkProxy with tracing off, at 1% and at
// 100% sampling, each also with Istio's standard metrics on, in one run
// (issue 47's figure: against "off", all of it off): each traced gateway exports over OTLP/HTTP to
// a collector on loopback that reads and discards the batches, so the
// export's CPU (encoding, sending) is in the figure. Compare the
// sub-benchmarks' ns/op against "off" of the same run (-count 3 to see the
// spread); spans/op and dropped/op say what the exporter did.
func BenchmarkProxyTracing(b *testing.B) {
	var received atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
	}))
	defer collector.Close()
	for _, mode := range []struct {
		name    string
		rate    float64 // <0: off
		metrics bool    // Istio's standard metrics on too
	}{{"off", -1, false}, {"sample1pct", 0.01, false}, {"sample100pct", 1, false},
		{"metrics", -1, true}, {"sample1pct+metrics", 0.01, true}, {"sample100pct+metrics", 1, true}} {
		b.Run(mode.name, func(b *testing.B) {
			opts := gateway.Options{IstioMetrics: mode.metrics}
			var exp *trace.Exporter
			if mode.rate >= 0 {
				s, err := trace.NewSampler(mode.rate, false)
				if err != nil {
					b.Fatal(err)
				}
				if exp, err = trace.NewExporter(trace.ExporterOptions{Endpoint: collector.URL, Protocol: trace.ProtocolHTTP}); err != nil {
					b.Fatal(err)
				}
				defer exp.Close(context.Background())
				opts.Tracing = &gateway.Tracing{Sampler: s, Sink: exp, NodeID: "bench"}
			}
			benchProxyWith(b, opts)
			if exp != nil {
				st := exp.Stats()
				b.ReportMetric(float64(st.Exported+st.DroppedFull+st.DroppedError+uint64(st.Queued))/float64(b.N), "spans/op")
				b.ReportMetric(float64(st.DroppedFull+st.DroppedError)/float64(b.N), "dropped/op")
			}
		})
	}
}

// startFastUpstream serves h on a loopback fasthttp server until the
// test ends: a cheap endpoint for benchmarks.
func startFastUpstream(tb testing.TB, h fasthttp.RequestHandler) *upstream {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	up := &fasthttp.Server{Handler: h}
	go up.Serve(ln)
	tb.Cleanup(func() { _ = up.Shutdown() })
	tcp := ln.Addr().(*net.TCPAddr)
	return &upstream{name: "fast", host: tcp.IP.String(), port: uint32(tcp.Port)}
}

// benchProxyWith runs BenchmarkProxy's calls (and BenchmarkProxyTracing's) through a
// gateway of opts.
func benchProxyWith(b *testing.B, opts gateway.Options, mods ...func(*cluster.Cluster)) {
	body := make([]byte, 1024)
	u := startFastUpstream(b, func(ctx *fasthttp.RequestCtx) { ctx.SetBody(body) })
	cp := startControlPlaneB(b)
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "u"))),
		edsCluster("u", mods...), assignment("u", ep{u: u}))
	g := startGatewayWith(b, cp.addr, opts)
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
