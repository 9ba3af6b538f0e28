package gateway_test

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestMaxConnectionDuration: a cluster's max_connection_duration retires
// its HTTP/1.1 connections once that time has passed since they were
// dialed (fasthttp's pool enforces it only in its own client, which the
// gateway does not use): calls one after another for three durations
// take at least three connections, none carrying calls for much longer
// than the duration.
func TestMaxConnectionDuration(t *testing.T) {
	const maxAge = 500 * time.Millisecond
	type span struct{ first, last time.Time }
	var mu sync.Mutex
	conns := map[string]*span{}
	u := startUpstream(t, "aged", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		mu.Lock()
		if s := conns[r.RemoteAddr]; s != nil {
			s.last = now
		} else {
			conns[r.RemoteAddr] = &span{now, now}
		}
		mu.Unlock()
		io.WriteString(w, "aged")
	})
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", u.name))),
		edsCluster(u.name, func(c *cluster.Cluster) {
			c.CommonHttpProtocolOptions = &core.HttpProtocolOptions{MaxConnectionDuration: durationpb.New(maxAge)}
		}), assignment(u.name, ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/", "aged")
	mu.Lock()
	clear(conns)
	mu.Unlock()
	start := time.Now()
	for i := 0; i < 300 && time.Since(start) < 3*maxAge+100*time.Millisecond; i++ {
		if code, body, _ := g.get(t, "/"); code != 200 || body != "aged" {
			t.Fatalf("call %d: %d %q", i, code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) < 3 {
		t.Errorf("%v of calls took %d upstream connections, want at least 3 (max_connection_duration %v)", time.Since(start), len(conns), maxAge)
	}
	for addr, s := range conns {
		// A call that began within the duration may end after it.
		if d := s.last.Sub(s.first); d > maxAge+400*time.Millisecond {
			t.Errorf("connection %s carried calls for %v, max_connection_duration %v", addr, d, maxAge)
		}
	}
}
