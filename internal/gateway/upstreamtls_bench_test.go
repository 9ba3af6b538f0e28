package gateway_test

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/valyala/fasthttp"
)

// BenchmarkUpstreamTLS is one call through the gateway to a fasthttp
// upstream (keep-alive, 1 KiB answers) in plaintext and over TLS 1.3 (CA
// by SDS, a SAN matcher), in one run: the ratio of the two is what TLS to
// the endpoints costs per call once connections are pooled.
func BenchmarkUpstreamTLS(b *testing.B) {
	body := make([]byte, 1024)
	ca := newPKI(b)
	sc, sk := ca.issue(b, false, "bench.internal")
	cert, err := tls.X509KeyPair(sc, sk)
	if err != nil {
		b.Fatal(err)
	}
	serve := func(withTLS bool) *upstream {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		tcp := ln.Addr().(*net.TCPAddr)
		if withTLS {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(body) }}
		go srv.Serve(ln)
		b.Cleanup(func() { _ = srv.Shutdown() })
		return &upstream{name: "u", host: tcp.IP.String(), port: uint32(tcp.Port)}
	}
	plain, secure := serve(false), serve(true)
	cp := startControlPlaneB(b)
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/tls", "secure"), prefixRoute("/", "plain"))),
		edsCluster("plain"), assignment("plain", ep{u: plain}),
		tlsCluster(edsCluster("secure"), &tlsv3.UpstreamTlsContext{Sni: "bench.internal", CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:         []string{"http/1.1"},
			ValidationContextType: sdsValidation("ca", exactSAN(tlsv3.SubjectAltNameMatcher_DNS, "bench.internal"))}}),
		assignment("secure", ep{u: secure}), caSecret("ca", ca.pem))
	g := startGatewayB(b, cp.addr)
	addr := g.url[len("http://"):]
	for _, tc := range []struct{ name, path string }{{"plaintext", "/"}, {"tls", "/tls"}} {
		b.Run(tc.name, func(b *testing.B) {
			hc := &fasthttp.HostClient{Addr: addr, MaxConns: 256}
			defer hc.CloseIdleConnections()
			deadline := time.Now().Add(10 * time.Second)
			for {
				code, _, err := hc.Get(nil, "http://"+addr+tc.path)
				if err == nil && code == 200 {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("no answer: %v %d", err, code)
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				req.SetRequestURI("http://" + addr + tc.path)
				for pb.Next() {
					if err := hc.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Errorf("call: %v %d", err, resp.StatusCode())
						return
					}
				}
			})
		})
	}
}
