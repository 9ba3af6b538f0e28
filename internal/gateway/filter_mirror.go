package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

// mirrorSpec is one of a route's request_mirror_policies (Istio's mirror
// and mirrors): a copy of a share of the route's calls goes to cluster.
type mirrorSpec struct {
	cluster    string
	perMillion uint32 // the share of calls mirrored, of a million
}

// mirrorRT is a mirrorSpec with its cluster resolved by the table (nil:
// not in the configuration; the copy is not sent).
type mirrorRT struct {
	spec    mirrorSpec
	cluster *clusterRT
}

// decodeMirrors reads a route action's request_mirror_policies. A policy
// without runtime_fraction mirrors every call, as in Envoy; the runtime
// key is not read (the gateway has no runtime), its default value is.
func decodeMirrors(ra *route.RouteAction, path string) ([]mirrorSpec, error) {
	var out []mirrorSpec
	for i, p := range ra.GetRequestMirrorPolicies() {
		pp := fmt.Sprintf("%s.request_mirror_policies[%d]", path, i)
		if p.GetCluster() == "" {
			if p.GetClusterHeader() != "" {
				return nil, fieldErr(pp+".cluster_header", "%v (cluster)", errUnsupported)
			}
			return nil, fieldErr(pp+".cluster", "empty")
		}
		if p.GetDisableShadowHostSuffixAppend() {
			return nil, fieldErr(pp+".disable_shadow_host_suffix_append", "%v", errUnsupported)
		}
		m := mirrorSpec{cluster: p.GetCluster(), perMillion: 1_000_000}
		if rf := p.GetRuntimeFraction(); rf != nil {
			fp := rf.GetDefaultValue()
			n := uint64(fp.GetNumerator())
			switch fp.GetDenominator() {
			case typev3.FractionalPercent_HUNDRED:
				n *= 10_000
			case typev3.FractionalPercent_TEN_THOUSAND:
				n *= 100
			}
			m.perMillion = uint32(min(n, 1_000_000))
		}
		if m.perMillion > 0 {
			out = append(out, m)
		}
	}
	return out, nil
}

// maxMirrorsInFlight bounds the copies on their way at once, over all
// routes: past it a copy is dropped (and counted), so a slow mirror
// costs the calls it copies nothing but the copy.
const maxMirrorsInFlight = 256

// mirrors owns the copies in flight: each runs on a goroutine of its own,
// bounded by its route's timeout, and Shutdown waits for them.
type mirrors struct {
	mu       sync.Mutex // guards closed and inFlight with wg.Add, so Shutdown's Wait sees every Add
	closed   bool
	inFlight int
	wg       sync.WaitGroup

	sent    atomic.Uint64 // copies answered (any status)
	failed  atomic.Uint64 // copies sent that got no answer: connection refused or broken, timeout
	dropped atomic.Uint64 // copies not sent: too many in flight, a streamed body, no endpoint, shut down
}

// start takes a slot for one copy; false: none (too many in flight, or
// shut down).
func (ms *mirrors) start() bool {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.closed || ms.inFlight >= maxMirrorsInFlight {
		return false
	}
	ms.inFlight++
	ms.wg.Add(1)
	return true
}

func (ms *mirrors) done() {
	ms.mu.Lock()
	ms.inFlight--
	ms.mu.Unlock()
	ms.wg.Done()
}

// mirror sends a copy of the call's request, as the route's filters and
// prepareRequest left it, to each of route r's mirrors whose share the
// call falls in: fire and forget, its answer read and dropped. Called on
// the call's goroutine before the call goes upstream; it never blocks. A
// request whose body streams (over the route's buffer limit) is not
// copied: Envoy too mirrors only what it buffered.
func (g *Gateway) mirror(ctx *fasthttp.RequestCtx, r *routeRT, timeout time.Duration) {
	if timeout <= 0 {
		timeout = 15 * time.Second // Envoy's default route timeout
	}
	for i := range r.mirrors {
		m := &r.mirrors[i]
		if m.spec.perMillion < 1_000_000 && rand.Uint32N(1_000_000) >= m.spec.perMillion {
			continue
		}
		if m.cluster == nil || ctx.Request.IsBodyStream() || !g.mirrors.start() {
			g.mirrors.dropped.Add(1)
			continue
		}
		req := fasthttp.AcquireRequest()
		ctx.Request.CopyTo(req)
		req.Header.SetHostBytes(shadowHost(req.Header.Host()))
		// Set again on the Request, which drops a URI parsed before: fasthttp
		// would write its host upstream, not the shadow one.
		req.SetRequestURI(string(req.Header.RequestURI()))
		go g.sendMirror(m.cluster, req, time.Now().Add(timeout))
	}
}

// sendMirror sends one copy to an endpoint of c and drops the answer; it
// owns req. Its counts go to the mirror cluster's metrics, and its outcome
// to the cluster's balancer, as a call's do.
func (g *Gateway) sendMirror(c *clusterRT, req *fasthttp.Request, deadline time.Time) {
	defer g.mirrors.done()
	defer fasthttp.ReleaseRequest(req)
	res, err := c.lb.Pick(nil)
	if err != nil {
		g.mirrors.dropped.Add(1)
		return
	}
	ep := c.endpointFor(res.Host.ID)
	if ep == nil {
		res.Done(0, balancer.Canceled)
		g.mirrors.dropped.Add(1)
		return
	}
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	t0 := time.Now()
	err = ep.up.do(req, resp, nil, t0, deadline, 0)
	status := resp.StatusCode()
	if err == nil && resp.IsBodyStream() {
		// Read to its end, so that the connection goes back to the pool.
		_, err = io.Copy(io.Discard, resp.BodyStream())
		_ = resp.CloseBodyStream()
	}
	lat := time.Since(t0)
	outcome, _ := classify(err, status)
	res.Done(lat, outcome)
	if err != nil {
		status = 0
		g.mirrors.failed.Add(1)
	} else {
		g.mirrors.sent.Add(1)
	}
	ep.m.observe(status, lat)
	c.m.observe(status, lat)
}

// shadowHost is Envoy's shadow host: "-shadow" after the host name, before
// its port ("orders:8080" -> "orders-shadow:8080"); after an IP address,
// port and all, as Envoy does.
func shadowHost(host []byte) []byte {
	h, port, err := net.SplitHostPort(string(host))
	if err != nil || net.ParseIP(h) != nil || bytes.HasPrefix(host, []byte("[")) {
		return append(bytes.Clone(host), "-shadow"...)
	}
	return []byte(h + "-shadow:" + port)
}

// waitMirrors stops new copies and waits for those in flight, until ctx
// ends.
func (g *Gateway) waitMirrors(ctx context.Context) {
	g.mirrors.mu.Lock()
	g.mirrors.closed = true
	g.mirrors.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.mirrors.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
