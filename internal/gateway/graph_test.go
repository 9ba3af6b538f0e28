package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

// TestCallGraph: the service graph of a five-service chain read from a
// real call log: a caller named by its SPIFFE identity joins the node of
// the service of its name, a caller without one is "unknown"; each edge
// has its rate, error rate, p99 and mutual TLS share over the window.
func TestCallGraph(t *testing.T) {
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir(), FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	now := time.Now()
	chain := []string{"a", "b", "c", "d", "e"}
	for i, svc := range chain {
		principal, conn := "", calllog.ConnFlags(0) // the client calls a in plaintext
		if i > 0 {
			principal, conn = "spiffe://cluster.local/ns/default/sa/"+chain[i-1], calllog.ConnTLS|calllog.ConnPeerCert
		}
		for j := range 60 {
			status := uint16(200)
			if svc == "d" && j%4 == 0 { // c -> d fails a quarter of its calls
				status = 503
			}
			lg.Record(calllog.Record{Start: now.Add(-time.Duration(j+1) * 500 * time.Millisecond).UnixNano(), Latency: time.Duration(j+1) * time.Millisecond,
				Service: "default/" + svc, Cluster: "default/" + svc, Endpoint: "127.0.0.1:900" + fmt.Sprint(i), Status: status,
				Principal: principal, Method: "GET", Path: "/", Host: svc, Conn: conn})
		}
	}
	srv := httptest.NewServer(gateway.New(gateway.Options{}).AdminHandler(lg))
	defer srv.Close()
	q := url.Values{"from": {now.Add(-time.Minute).Format(time.RFC3339Nano)}, "to": {now.Format(time.RFC3339Nano)}}
	resp, err := http.Get(srv.URL + "/v1/calls/graph?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g gateway.Graph
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	if len(g.Nodes) != 6 || g.Nodes[5].ID != gateway.UnknownSource {
		t.Errorf("nodes %+v, want the five services and unknown", g.Nodes)
	}
	want := map[string]gateway.GraphEdge{
		"unknown->default/a":   {Requests: 60, RPS: 1, MTLS: 0},
		"default/a->default/b": {Requests: 60, RPS: 1, MTLS: 1},
		"default/b->default/c": {Requests: 60, RPS: 1, MTLS: 1},
		"default/c->default/d": {Requests: 60, Errors: 15, RPS: 1, ErrorRate: 0.25, MTLS: 1},
		"default/d->default/e": {Requests: 60, RPS: 1, MTLS: 1},
	}
	if len(g.Edges) != len(want) {
		t.Fatalf("edges %+v", g.Edges)
	}
	for _, e := range g.Edges {
		w, ok := want[e.Source+"->"+e.Destination]
		if !ok || e.Requests != w.Requests || e.Errors != w.Errors || e.RPS != w.RPS || e.ErrorRate != w.ErrorRate || e.MTLS != w.MTLS {
			t.Errorf("edge %+v, want %+v", e, w)
		}
		if e.P99Ms != 60 || e.P50Ms != 30 { // latencies 1..60 ms
			t.Errorf("%s->%s: p50 %v p99 %v, want 30 and 60", e.Source, e.Destination, e.P50Ms, e.P99Ms)
		}
	}
	// A window names its bounds; a bad one is refused.
	for _, bad := range []string{"window=-1s", "from=yesterday", "from=" + url.QueryEscape(now.Format(time.RFC3339)) + "&to=" + url.QueryEscape(now.Add(-time.Hour).Format(time.RFC3339))} {
		resp, err := http.Get(srv.URL + "/v1/calls/graph?" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", bad, resp.StatusCode)
		}
	}
}

// TestCallGraphFromTraffic: the graph of real calls through the gateway's
// TLS listener: five services in a chain, each calling the next through
// the gateway with a client certificate of its own SPIFFE identity (the
// client calls the first without one); d fails a third of its calls.
// The gateway's records give the chain, the failing edge and mutual TLS.
func TestCallGraphFromTraffic(t *testing.T) {
	ca, clients := newPKI(t), newPKI(t)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	sc, sk := ca.issue(t, false, "shop.test")
	chain := []string{"a", "b", "c", "d", "e"}
	client := map[string]*http.Client{}
	for _, s := range chain {
		client[s] = g.tlsClient(ca.pool, false, clients.spiffeCert(t, "spiffe://cluster.local/ns/shop/sa/"+s))
	}
	var dCalls atomic.Int64
	res := []types.Resource{certSecret("c", sc, sk), caSecret("clients", clients.pem)}
	var routes []*route.Route
	for i, s := range chain {
		next := ""
		if i+1 < len(chain) {
			next = chain[i+1]
		}
		up := startUpstream(t, s, func(w http.ResponseWriter, r *http.Request) {
			if s == "d" && dCalls.Add(1)%3 == 0 {
				w.WriteHeader(503)
				return
			}
			if next != "" {
				// The next hop's answer is not this one's: c answers 200
				// whatever d did.
				if resp, err := client[s].Get("https://shop.test/" + next); err == nil {
					resp.Body.Close()
				}
			}
			io.WriteString(w, s)
		})
		name := s
		res = append(res, edsCluster(name, func(c *cluster.Cluster) {
			c.Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{gateway.SextantMetadataKey: {Fields: map[string]*structpb.Value{
				"service": structpb.NewStringValue("shop/" + s)}}}}
		}), assignment(name, ep{u: up}))
		routes = append(routes, prefixRoute("/"+s, name))
	}
	cp.set(append(res, tlsListener("gw-tls", g.tlsPort(), tlsChain{cert: "c", ca: "clients", require: false}),
		routeConfig("routes", vhost("all", []string{"*"}, routes...)))...)
	anon := g.tlsClient(ca.pool, false)
	waitFor(t, "the chain to answer", func() bool {
		resp, err := anon.Get("https://shop.test/e")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	from := time.Now()
	for range 30 {
		resp, err := anon.Get("https://shop.test/a")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var gr gateway.Graph
	g.adminJSON(t, "/v1/calls/graph?from="+url.QueryEscape(from.Format(time.RFC3339Nano)), &gr)
	want := map[string]struct {
		n, errs int64
		mtls    float64
	}{
		"unknown->shop/a": {30, 0, 0}, "shop/a->shop/b": {30, 0, 1}, "shop/b->shop/c": {30, 0, 1},
		"shop/c->shop/d": {30, 10, 1}, "shop/d->shop/e": {20, 0, 1},
	}
	got := map[string]gateway.GraphEdge{}
	for _, e := range gr.Edges {
		got[e.Source+"->"+e.Destination] = e
	}
	for k, w := range want {
		e, ok := got[k]
		if !ok || e.Requests != w.n || e.Errors != w.errs || e.MTLS != w.mtls || e.P99Ms <= 0 {
			t.Errorf("edge %s: %+v, want %d calls, %d errors, mtls %v", k, e, w.n, w.errs, w.mtls)
		}
	}
	if len(gr.Edges) != len(want) {
		t.Errorf("edges %+v", gr.Edges)
	}
}
