package main

import (
	"context"
	"testing"
	"time"
)

// sourceConfig routes orders by the caller's labels and namespace; the
// route of another caller comes first.
const sourceConfig = ordersSubsetsRule + `---
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
	registerOrderVersions(t, api)
	if _, err := api.ApplyConfig(ctx, []byte(sourceConfig), false); err != nil {
		t.Fatal(err)
	}
	call := func() string { return echoName(t, proxy, "GET", "orders", "/", nil) }
	// Until the VirtualService is in the gateway, calls go to any version
	// at random: wait for ten v2 answers in a row (by chance: 1 in 3^10).
	waitTrue(t, 15*time.Second, func() bool {
		for range 10 {
			if call() != "orders-v2" {
				return false
			}
		}
		return true
	})
	for i := 0; i < 20; i++ {
		if got := call(); got != "orders-v2" {
			t.Fatalf("call %d answered by %q, want orders-v2 (the route of its labels and namespace)", i, got)
		}
	}
}
