package main

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/console/browsertest"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

// TestConsoleServiceGraph: the console's service graph of a five-service
// chain (a -> b -> c -> d -> e, each calling with the mutual TLS identity
// of its own name, the client calling a in plaintext) in Chromium, against
// the real server and a gateway admin API over a real call log, whose
// records the test writes as the gateway writes a call's: the graph
// appears within 5 s of the calls starting, the edge c -> d, failing a
// third of its calls, is red, the others green, the client's edge dashed
// (no mutual TLS); an edge links to its calls.
func TestConsoleServiceGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("browser")
	}
	httpAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	serverDone := make(chan error, 1)
	data := t.TempDir()
	go func() {
		serverDone <- runServer(ctx, serverFlags{data: data, http: httpAddr, logFormat: "text", logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-serverDone; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	base := "http://" + httpAddr
	waitTrue(t, 60*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir(), FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := &http.Server{Handler: gateway.New(gateway.Options{}).AdminHandlerOptions(lg, gateway.AdminOptions{Origins: []string{base}})}
	go admin.Serve(ln)
	t.Cleanup(func() { admin.Close() })
	api, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if _, err := api.Register(context.Background(), client.Instance{ID: "gw-1", Service: "sextant-gateway", Host: "127.0.0.1", Port: port,
		Metadata: map[string]string{"sextant.role": "gateway", "sextant.admin": ln.Addr().String(), "sextant.node": "graph-gateway"}}); err != nil {
		t.Fatal(err)
	}

	b := browsertest.Start(t)
	// From the Calls page, as a reader finds it.
	b.Navigate(t, base+"/ui/#/calls")
	b.WaitTrue(t, 15*time.Second, "the graph's link", `document.querySelector('#calls-graph-link')`)
	b.Click(t, "#calls-graph-link")
	b.WaitTrue(t, 15*time.Second, "an empty graph", `document.querySelector('main .empty') && document.querySelector('main .empty').textContent.includes('No calls')`)

	// Traffic starts: every 50 ms a call along the chain.
	chain := []string{"a", "b", "c", "d", "e"}
	stop := make(chan struct{})
	done := make(chan struct{})
	var n atomic.Int64
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				i := n.Add(1)
				for j, svc := range chain {
					r := calllog.Record{Start: now.UnixNano(), Latency: time.Duration(5+j) * time.Millisecond, Service: "default/" + svc,
						Cluster: "default/" + svc, Endpoint: "127.0.0.1:900" + strconv.Itoa(j), Status: 200, Method: "GET", Path: "/", Host: svc}
					if j > 0 {
						r.Principal, r.Conn = "spiffe://cluster.local/ns/default/sa/"+chain[j-1], calllog.ConnTLS|calllog.ConnPeerCert
					}
					if svc == "d" && i%3 == 0 {
						r.Status = 503
					}
					lg.Record(r)
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	start := time.Now()
	b.WaitTrue(t, 5*time.Second, "the chain drawn", `document.querySelectorAll('#service-graph g.edge').length === 5 && document.querySelectorAll('#service-graph g.node').length === 6`)
	t.Logf("the graph appeared %v after the calls started", time.Since(start).Round(10*time.Millisecond))
	b.WaitTrue(t, 10*time.Second, "edge colors", `(() => {
		const e = (s, d) => document.querySelector('#service-graph g.edge[data-source="' + s + '"][data-destination="' + d + '"]');
		const ok = ['unknown/default/a', 'default/a/default/b', 'default/b/default/c', 'default/d/default/e'];
		return e('default/c', 'default/d') && e('default/c', 'default/d').classList.contains('edge-bad')
			&& e('unknown', 'default/a').classList.contains('edge-ok') && e('unknown', 'default/a').querySelector('path').classList.contains('plain')
			&& e('default/a', 'default/b').classList.contains('edge-ok') && !e('default/a', 'default/b').querySelector('path').classList.contains('plain')
			&& e('default/d', 'default/e').classList.contains('edge-ok')
			&& e('default/c', 'default/d').textContent.includes('33') && e('default/a', 'default/b').textContent.includes('mTLS');
	})()`)
	// Left to right along the chain.
	xs := browsertest.Eval[[]float64](t, b, `['unknown', 'default/a', 'default/b', 'default/c', 'default/d', 'default/e'].map(id =>
		document.querySelector('#service-graph g.node[data-id="' + id + '"]').getBoundingClientRect().left)`)
	for i := 1; i < len(xs); i++ {
		if xs[i] <= xs[i-1] {
			t.Errorf("nodes not left to right along the chain: %v", xs)
		}
	}
	b.Layout(t, "graph.png")
	b.NoProblems(t, "graph")
	b.Click(t, `#service-graph g.edge[data-destination="default/d"] a`)
	b.WaitTrue(t, 10*time.Second, "the failing edge's calls", `location.hash.startsWith('#/calls') && location.hash.includes('default%2Fd')`)
}
