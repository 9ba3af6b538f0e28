package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

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
