// Package push is the load generator behind "sextant bench push": seed
// 001's scenario (services with a DestinationRule of blue, green, gray and
// stable subsets and a VirtualService matching three of them by header plus
// a stable default; instances spread over them), real ADS streams from
// simulated subscribers, endpoint churn under config churn. It drives the
// push engine in-process through its Source interface (an in-memory
// registry); the HTTP path comes with the server's wiring.
package push

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// colors are the subsets: the first three matched by header, the last the
// default route.
var colors = []string{"blue", "green", "gray", "stable"}

func serviceName(i int) string { return fmt.Sprintf("svc-%04d", i) }

func serviceKey(i int) naming.ServiceKey {
	return naming.ServiceKey{Namespace: "default", Name: serviceName(i)}
}

// destinationRule of service i; gen varies its outlier detection, so that
// each generation changes the service's clusters.
func destinationRule(i, gen int) *config.Object {
	dr := &networking.DestinationRule{Host: serviceName(i)}
	for _, c := range colors {
		dr.Subsets = append(dr.Subsets, &networking.Subset{Name: c, Labels: map[string]string{"color": c}})
	}
	if gen > 0 {
		dr.TrafficPolicy = &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{
			Consecutive_5XxErrors: wrapperspb.UInt32(uint32(gen%1000 + 1)),
		}}
	}
	return &config.Object{Key: config.Key{Kind: config.KindDestinationRule, Namespace: "default", Name: serviceName(i)}, DestinationRule: dr}
}

// virtualService of service i: header x-group picks blue, green or gray,
// everything else goes to stable; gen varies the header values.
func virtualService(i, gen int) *config.Object {
	vs := &networking.VirtualService{Hosts: []string{serviceName(i)}}
	for _, c := range colors[:3] {
		v := c
		if gen > 0 {
			v = fmt.Sprintf("%s-%d", c, gen)
		}
		vs.Http = append(vs.Http, &networking.HTTPRoute{
			Match: []*networking.HTTPMatchRequest{{Headers: map[string]*networking.StringMatch{
				"x-group": {MatchType: &networking.StringMatch_Exact{Exact: v}},
			}}},
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: serviceName(i), Subset: c}}},
		})
	}
	vs.Http = append(vs.Http, &networking.HTTPRoute{
		Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: serviceName(i), Subset: "stable"}}},
	})
	return &config.Object{Key: config.Key{Kind: config.KindVirtualService, Namespace: "default", Name: serviceName(i)}, VirtualService: vs}
}

// instance j of the scenario: service j mod services, its color cycling
// with j / services, a distinct loopback-free private address.
func newInstance(j, services int) *instance.Instance {
	svc := j % services
	return &instance.Instance{
		ID: fmt.Sprintf("i-%06d", j), Namespace: "default", Service: serviceName(svc),
		Host: fmt.Sprintf("10.%d.%d.%d", j>>16&255, j>>8&255, j&255), Port: 8080, Weight: 100, Healthy: true,
		Metadata: label.FromMap(map[string]string{"color": colors[(j/services)%len(colors)], "zone": fmt.Sprintf("z%d", j%3)}),
	}
}

// Load fills reg with the scenario: services with a DestinationRule and a
// VirtualService each, endpoints instances spread over them.
func Load(reg *pushtest.Registry, services, endpoints int) error {
	for i := range services {
		for _, o := range []*config.Object{destinationRule(i, 0), virtualService(i, 0)} {
			if err := config.Validate(o); err != nil {
				return err
			}
			reg.ApplyConfig(o)
		}
	}
	batch := make([]*instance.Instance, 0, 1000)
	for j := range endpoints {
		batch = append(batch, newInstance(j, services))
		if len(batch) == cap(batch) || j == endpoints-1 {
			reg.Upsert(batch...)
			batch = batch[:0]
		}
	}
	return nil
}

// churner changes the scenario: instances down and up again, and
// VirtualService / DestinationRule generations.
type churner struct {
	reg       *pushtest.Registry
	rng       *rand.Rand
	services  int
	endpoints int
	down      map[int]bool
	downList  []int
	gen       int
	// settled, when set, says whether instance j's down has been written
	// long enough ago to bring it back (bench push --servers writes in
	// parallel: a down and an up of one instance both in flight could
	// cancel out before a server reads them, changing nothing to push).
	settled func(j int) bool
	// busy, when set, says whether a write of instance j is still in
	// flight: it is not taken down then (bench push --servers: a DELETE
	// overtaking the POST that brought j back was refused with 404 and
	// ended the run).
	busy func(j int) bool
	// minDown, when set, keeps an instance down at least this long (the
	// in-process bench, which commits at once: when its loop catches up
	// after waiting for a core, a down and up of one instance could fall
	// in one engine batch). downAt is when each went down.
	minDown time.Duration
	downAt  map[int]time.Time
}

// endpointChange takes a random instance down, or brings one back when 50
// (or 1%) are down; commit is given the EDS resource that must change and the
// change, which it commits.
func (c *churner) endpointChange(commit func(name string, f func())) {
	_, in, up := c.next()
	commit(endpointSet(in), func() {
		if up {
			c.reg.Upsert(in)
		} else {
			c.reg.Delete(naming.ServiceKey{Namespace: "default", Name: in.Service}, in.ID)
		}
	})
}

// endpointSet is the EDS resource a change of in changes: its subset's.
func endpointSet(in *instance.Instance) string {
	color, _ := in.Metadata.Get("color")
	return xds.ClusterName(naming.ServiceKey{Namespace: in.Namespace, Name: in.Service}, color, 0)
}

// next picks the instance to take down, or to bring back (up).
func (c *churner) next() (j int, in *instance.Instance, up bool) {
	up = len(c.downList) >= min(50, max(1, c.endpoints/100)) && (c.settled == nil || c.settled(c.downList[0])) &&
		(c.minDown == 0 || time.Since(c.downAt[c.downList[0]]) >= c.minDown)
	if len(c.down) >= c.endpoints {
		up = true // all down (a tiny scenario): the longest down comes back anyway
	}
	if up {
		// The longest down comes back: a quick down and up of one instance
		// could cancel out before the engine reads it, changing nothing.
		j = c.downList[0]
		c.downList = c.downList[1:]
		delete(c.down, j)
	} else {
		for {
			j = c.rng.IntN(c.endpoints)
			if !c.down[j] && (c.busy == nil || !c.busy(j)) {
				break
			}
		}
		c.down[j] = true
		c.downList = append(c.downList, j)
		if c.minDown > 0 {
			if c.downAt == nil {
				c.downAt = map[int]time.Time{}
			}
			c.downAt[j] = time.Now()
		}
	}
	return j, newInstance(j, c.services), up
}

// configChange alternates a VirtualService and a DestinationRule change of
// a random service; commit is given the type and name of a resource that
// must change and the change, which it commits.
func (c *churner) configChange(commit func(typ xds.Type, name string, f func())) {
	typ, name, o := c.nextConfig()
	commit(typ, name, func() { c.reg.ApplyConfig(o) })
}

// nextConfig is the next config change: a VirtualService or a
// DestinationRule of a random service, in turn, and the resource whose
// arrival shows it (a DestinationRule's: one cluster CDS carries, a subset
// with an instance up, since an empty subset has no cluster).
func (c *churner) nextConfig() (xds.Type, string, *config.Object) {
	c.gen++
	i := c.rng.IntN(c.services)
	if c.gen%2 == 0 {
		return xds.TypeRoute, xds.RouteName(serviceKey(i)), virtualService(i, c.gen)
	}
	watch := "stable"
	for _, color := range colors {
		if c.hasUp(i, color) {
			watch = color
			break
		}
	}
	return xds.TypeCluster, xds.ClusterName(serviceKey(i), watch, 0), destinationRule(i, c.gen)
}

// hasUp reports whether subset color of service i has an instance up.
func (c *churner) hasUp(i int, color string) bool {
	for j := i; j < c.endpoints; j += c.services {
		if colors[(j/c.services)%len(colors)] == color && !c.down[j] {
			return true
		}
	}
	return false
}

// sidecar is the Sidecar of namespace default (the subscribers') importing
// the first n services, REGISTRY_ONLY.
func sidecar(n int) (*config.Object, error) {
	var b strings.Builder
	b.WriteString("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: default}\nspec:\n  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n  egress:\n  - hosts:\n")
	for i := range n {
		fmt.Fprintf(&b, "    - ./%s.default.svc.cluster.local\n", serviceName(i))
	}
	objs, err := config.Decode([]byte(b.String()))
	if err != nil {
		return nil, err
	}
	return objs[0], nil
}

// serviceIndex is the index of the service a resource name ("default/svc-0007",
// "default/svc-0007/blue") is of, -1 if none.
func serviceIndex(name string) int {
	_, rest, _ := strings.Cut(name, "/svc-")
	rest, _, _ = strings.Cut(rest, "/")
	i, err := strconv.Atoi(rest)
	if err != nil {
		return -1
	}
	return i
}
