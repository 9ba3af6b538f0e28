package xds

import (
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/sextant-mesh/sextant/internal/config"
)

// routeTo is a route configuration sending everything to cluster (its
// virtual host named after the version, so that each version's bytes
// differ).
func routeTo(name, version, cluster string) Resource {
	return Resource{Name: name, Version: version, Message: &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name: name + "-" + version, Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}}
}

// TestRoutesWaitForTheirClusters: a route or listener published after a
// cluster addition is not sent before that cluster has been (here the
// cluster response waits for the client's ACK of the previous one), state
// of the world and delta; a route published before the cluster change
// goes at once, and so does one published after a new version of a
// cluster the client already has.
func TestRoutesWaitForTheirClusters(t *testing.T) {
	for _, delta := range []bool{false, true} {
		c := NewCache()
		now := time.Now()
		c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{})}, nil, "1", now)
		c.Apply(TypeRoute, []Resource{routeTo("r", "1", "a"), routeTo("q", "1", "a")}, nil, "1", now)
		c.Apply(TypeListener, []Resource{{Name: "l", Version: "1", Message: &listenerv3.Listener{Name: "l"}}}, nil, "1", now)
		srv := NewServer(c, ServerOptions{AckWait: time.Hour}) // the test answers
		sub := &subscriber{c: c, delta: delta, wake: make(chan struct{}, 1), ackWait: srv.ackWait}
		c.addSubscriber(sub)
		srv.onRequest(sub, request{typeURL: TypeCluster.URL()})
		srv.onRequest(sub, request{typeURL: TypeListener.URL()})
		srv.onRequest(sub, request{typeURL: TypeRoute.URL(), names: []string{"r", "q"}, subscribe: []string{"r", "q"}})
		build := func(typ Type) (response, bool) {
			sub.mu.Lock()
			defer sub.mu.Unlock()
			return sub.build(typ, now)
		}
		ack := func(typ Type, r response) {
			req := request{typeURL: typ.URL(), nonce: r.nonce}
			if typ == TypeRoute {
				req.names = []string{"r", "q"}
			}
			srv.onRequest(sub, req)
		}
		// A new subscriber: routes and listeners wait for the first
		// cluster response.
		if _, ok := build(TypeRoute); ok {
			t.Fatalf("delta %v: routes sent before any cluster", delta)
		}
		if _, ok := build(TypeListener); ok {
			t.Fatalf("delta %v: listeners sent before any cluster", delta)
		}
		cds, ok := build(TypeCluster)
		if !ok {
			t.Fatalf("delta %v: no first cluster response", delta)
		}
		for _, typ := range []Type{TypeListener, TypeRoute} {
			r, ok := build(typ)
			if !ok {
				t.Fatalf("delta %v: no first %s response after the clusters", delta, typ)
			}
			ack(typ, r)
		}
		// q changes before the cluster b appears, r and l after it (r now
		// routes to b). The cluster response waits for the client's ACK of
		// the first one.
		c.Apply(TypeRoute, []Resource{routeTo("q", "2", "a")}, nil, "2", now)
		c.Apply(TypeCluster, []Resource{cluster("b", config.Policy{})}, nil, "3", now)
		c.Apply(TypeRoute, []Resource{routeTo("r", "3", "b")}, nil, "3", now)
		c.Apply(TypeListener, []Resource{{Name: "l", Version: "3", Message: &listenerv3.Listener{Name: "l", StatPrefix: "3"}}}, nil, "3", now)
		if _, ok := build(TypeCluster); ok {
			t.Fatalf("delta %v: cluster response before the ACK", delta)
		}
		r, ok := build(TypeRoute)
		if !ok || r.count != 1 {
			t.Fatalf("delta %v: route response %v with %d routes, want q alone (r waits for cluster b)", delta, ok, r.count)
		}
		ack(TypeRoute, r)
		if r, ok := build(TypeRoute); ok {
			t.Fatalf("delta %v: route r (%d routes) sent before cluster b", delta, r.count)
		}
		if _, ok := build(TypeListener); ok {
			t.Fatalf("delta %v: listener sent before cluster b", delta)
		}
		// The ACK: cluster b goes, then r and l.
		ack(TypeCluster, cds)
		if cds, ok = build(TypeCluster); !ok {
			t.Fatalf("delta %v: no cluster response after the ACK", delta)
		}
		if r, ok = build(TypeRoute); !ok || r.count != 1 {
			t.Fatalf("delta %v: route r not sent after cluster b (%v, %d)", delta, ok, r.count)
		}
		ack(TypeRoute, r)
		if _, ok := build(TypeListener); !ok {
			t.Fatalf("delta %v: listener not sent after cluster b", delta)
		}
		// A new version of cluster a, which the client has: routes
		// published after it go at once, though the cluster response
		// waits for the ACK of the last (issue 49: every VirtualService
		// change waited for the next cluster list). A new cluster c still
		// holds what is published after it.
		c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{ConnectTimeout: time.Second})}, nil, "4", now)
		c.Apply(TypeRoute, []Resource{routeTo("q", "4", "a")}, nil, "4", now)
		if _, ok := build(TypeCluster); ok {
			t.Fatalf("delta %v: cluster response before the ACK", delta)
		}
		r, ok = build(TypeRoute)
		if !ok || r.count != 1 {
			t.Fatalf("delta %v: route q (%v, %d routes) held behind a new version of a cluster the client has", delta, ok, r.count)
		}
		ack(TypeRoute, r)
		c.Apply(TypeCluster, []Resource{cluster("c", config.Policy{})}, nil, "5", now)
		c.Apply(TypeRoute, []Resource{routeTo("r", "5", "c")}, nil, "5", now)
		if r, ok := build(TypeRoute); ok {
			t.Fatalf("delta %v: route r (%d routes) sent before the new cluster c", delta, r.count)
		}
		c.removeSubscriber(sub)
	}
}
