package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	lbring "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestConsistentHash: a ring_hash cluster with a route hashing a header
// sends each key to one endpoint every time and spreads keys over all
// endpoints; when one endpoint of four leaves, every key that was not on it
// keeps its endpoint; a cookie hash with a TTL sets the cookie on a call
// without one, and a call that sends it back keeps its endpoint.
func TestConsistentHash(t *testing.T) {
	ups := []*upstream{startUpstream(t, "a", nil), startUpstream(t, "b", nil), startUpstream(t, "c", nil), startUpstream(t, "d", nil)}
	eps := func(us []*upstream) []ep {
		var out []ep
		for _, u := range us {
			out = append(out, ep{u: u})
		}
		return out
	}
	ringPolicy := func(c *cluster.Cluster) {
		a, _ := anypb.New(&lbring.RingHash{})
		c.LoadBalancingPolicy = &cluster.LoadBalancingPolicy{Policies: []*cluster.LoadBalancingPolicy_Policy{
			{TypedExtensionConfig: &core.TypedExtensionConfig{Name: "ring", TypedConfig: a}}}}
	}
	byHeader := prefixRoute("/", "svc")
	byHeader.GetRoute().HashPolicy = []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_Header_{
		Header: &route.RouteAction_HashPolicy_Header{HeaderName: "x-user"}}}}
	byCookie := prefixRoute("/sticky", "svc")
	byCookie.GetRoute().HashPolicy = []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_Cookie_{
		Cookie: &route.RouteAction_HashPolicy_Cookie{Name: "affinity", Path: "/sticky", Ttl: durationpb.New(time.Hour)}}}}
	cp := startControlPlane(t, "")
	set := func(us []*upstream) {
		cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, byCookie, byHeader)),
			edsCluster("svc", ringPolicy), assignment("svc", eps(us)...))
	}
	set(ups)
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)

	const keys = 200
	where := func() map[string]string {
		m := map[string]string{}
		for i := range keys {
			user := fmt.Sprintf("user-%d", i)
			code, body, _ := g.get(t, "/x", "X-User", user)
			if code != 200 {
				t.Fatalf("%s: %d %s", user, code, body)
			}
			m[user] = strings.Fields(body)[0]
		}
		return m
	}
	spread := func(m map[string]string) map[string]int {
		n := map[string]int{}
		for _, u := range m {
			n[u]++
		}
		return n
	}
	var first map[string]string
	waitFor(t, "200 keys to reach all 4 endpoints", func() bool { first = where(); return len(spread(first)) == 4 })
	if again := where(); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatal("a key went to another endpoint on its second call")
	}

	// Endpoint d leaves: its keys move, and few others. Envoy's ring
	// (which the gateway's is) gives each endpoint of 3 more points than
	// each of 4 had, so a few keys of the others move too.
	set(ups[:3])
	var after map[string]string
	waitFor(t, "d to leave", func() bool { after = where(); return spread(after)["upstream=d"] == 0 })
	moved, others := 0, 0
	for user, was := range first {
		if was == "upstream=d" {
			continue
		}
		others++
		if after[user] != was {
			moved++
		}
	}
	t.Logf("%d of %d keys of the endpoints that stayed moved", moved, others)
	if moved*3 > others { // random picks would move two thirds
		t.Errorf("%d of %d keys of the endpoints that stayed moved, want at most a third", moved, others)
	}

	// Cookie: set on the first call, kept by the calls that send it.
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(g.url + "/sticky")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sc := resp.Header.Get("Set-Cookie")
	if !strings.HasPrefix(sc, "affinity=") || !strings.Contains(sc, "Path=/sticky") || !strings.Contains(sc, "Max-Age=3600") {
		t.Fatalf("Set-Cookie %q, want affinity=...; Path=/sticky; Max-Age=3600", sc)
	}
	cookie := strings.SplitN(sc, ";", 2)[0]
	var stuck string
	for i := range 30 {
		code, body, h := g.get(t, "/sticky", "Cookie", cookie)
		if code != 200 || h.Get("Set-Cookie") != "" {
			t.Fatalf("call with the cookie: %d %q Set-Cookie %q", code, body, h.Get("Set-Cookie"))
		}
		if i == 0 {
			stuck = strings.Fields(body)[0]
		} else if got := strings.Fields(body)[0]; got != stuck {
			t.Fatalf("call %d with the cookie went to %s, the first to %s", i, got, stuck)
		}
	}
}
