package gateway

import (
	"net"
	"net/http"

	"github.com/valyala/fasthttp"
)

// A sidecar's per-service port (sextant sidecar --outbound-port
// orders.shop=9080): an app that cannot use an HTTP proxy calls
// http://127.0.0.1:9080/x, and the call is routed as one to the service
// the port stands for, whatever its Host: the mesh's proxy listener's
// routes, with that service as Host.

// ServeService serves the proxy listener's routes on ln until Shutdown,
// with host as every call's Host (HTTP/1.1, and h2c with prior
// knowledge). It returns nil after Shutdown.
func (g *Gateway) ServeService(ln net.Listener, host string) error {
	hostB := []byte(host)
	return g.servePlain(ln, func(ctx *fasthttp.RequestCtx, ph *passHead) {
		ctx.Request.Header.SetHostBytes(hostB)
		g.serveOn(ctx, g.table.Load(), ph)
	}, func(w http.ResponseWriter, r *http.Request, ctx *fasthttp.RequestCtx) {
		ctx.Request.Header.SetHostBytes(hostB)
		g.serveH2(w, r, ctx)
	}, func(s servers) { g.tlsServers = append(g.tlsServers, s) }) // Shutdown drains them with the others
}
