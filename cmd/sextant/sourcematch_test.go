package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// sourceConfig routes orders by the caller's labels and namespace; the
// route of another caller comes first.
const sourceConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
  - {name: v3, labels: {version: v3}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - match: [{sourceLabels: {app: other}}]
    route: [{destination: {host: orders, subset: v3}}]
  - match: [{sourceLabels: {app: web}, sourceNamespace: elsewhere}]
    route: [{destination: {host: orders, subset: v3}}]
  - match: [{sourceLabels: {app: web}, sourceNamespace: default}]
    route: [{destination: {host: orders, subset: v2}}]
  - route: [{destination: {host: orders, subset: v1}}]
`

// TestSourceLabelsThroughGateway: a gateway started with --labels takes
// the routes whose sourceLabels and sourceNamespace match it, and only
// those, through the real server, as an Istio proxy does.
func TestSourceLabelsThroughGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, _, _ := startMeshWith(t, "", 10*time.Second, func(f *gatewayFlags, _ string) {
		f.labels = map[string]string{"app": "web", "version": "v9"}
	})
	for _, v := range []string{"v1", "v2", "v3"} {
		addr, _ := startEcho(t, "orders-"+v)
		if _, err := api.Register(ctx, client.Instance{ID: "orders-" + v, Service: "orders", Host: "127.0.0.1", Port: addr.Port,
			Metadata: map[string]string{"version": v}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.ApplyConfig(ctx, []byte(sourceConfig), false); err != nil {
		t.Fatal(err)
	}
	call := func() string {
		req, err := http.NewRequest("GET", "http://"+proxy+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "orders"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		name, _, _ := strings.Cut(string(b), " ")
		return name
	}
	waitTrue(t, 15*time.Second, func() bool { return call() == "orders-v2" })
	for i := 0; i < 20; i++ {
		if got := call(); got != "orders-v2" {
			t.Fatalf("call %d answered by %q, want orders-v2 (the route of its labels and namespace)", i, got)
		}
	}
}
