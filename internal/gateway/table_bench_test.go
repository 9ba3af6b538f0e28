package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/subset"
)

// BenchmarkRouteAndPick is the gateway's own work per call without the
// sockets: find the virtual host among 20, the route among 20 (prefix and
// header matches), the weighted target, and pick an endpoint of a 100-host
// cluster's subset with the adaptive policy.
func BenchmarkRouteAndPick(b *testing.B) {
	spec := &clusterSpec{name: "svc", service: "svc", policy: policySpec{name: "adaptive", bias: 1, decay: time.Second},
		subset:  &subset.Config{FallbackPolicy: subset.AnyEndpoint, Selectors: []subset.Selector{{Keys: []string{"version"}}}},
		connect: time.Second, budget: retryBudget{percent: 20, min: 3}}
	pol, err := newPolicy(spec)
	if err != nil {
		b.Fatal(err)
	}
	ms := newMetrics()
	c, err := newClusterRT(spec, pol, ms.cluster("svc"))
	if err != nil {
		b.Fatal(err)
	}
	var hosts []hostSpec
	for i := range 100 {
		hosts = append(hosts, hostSpec{addr: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250), weight: 1, healthy: true,
			labels: label.FromMap(map[string]string{"version": fmt.Sprintf("v%d", i%4)})})
	}
	var p pools
	defer p.closeAll()
	if err := c.setHosts(hosts, &p, ms); err != nil {
		b.Fatal(err)
	}
	rc := &routeConfigSpec{name: "r"}
	for v := range 20 {
		vh := &vhostSpec{name: fmt.Sprint(v), domains: []string{fmt.Sprintf("svc%d.example.com", v)}}
		for r := range 20 {
			vh.routes = append(vh.routes, &routeSpec{name: fmt.Sprint(r),
				match: matchSpec{kind: matchPrefix, value: fmt.Sprintf("/api/%d/", r),
					headers: []headerMatch{{name: "x-tenant", kind: strExact, value: "t1"}}},
				clusters: []clusterWeight{{name: "svc", weight: 1, md: map[string]string{"version": "v2"}}}})
		}
		rc.vhosts = append(rc.vhosts, vh)
	}
	tb := newTable(rc, map[string]*clusterRT{"svc": c})
	var h fasthttp.RequestHeader
	h.SetHost("svc19.example.com")
	h.Set("X-Tenant", "t1")
	path := []byte("/api/19/items")
	host := []byte("svc19.example.com")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r := tb.vhost(host).route(path, &h, false)
		tg := r.pick()
		res, err := tg.cluster.lb.Pick(tg.md)
		if err != nil {
			b.Fatal(err)
		}
		res.Done(time.Millisecond, 0)
	}
}
