package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// sidecarScope is Istio's Sidecar for the workloads labelled app=web in
// namespace default: they call orders only; mode is filled in.
const sidecarScope = `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: web, namespace: default}
spec:
  workloadSelector: {labels: {app: web}}
  outboundTrafficPolicy: {mode: MODE}
  egress:
  - hosts: ["./orders.default.svc.cluster.local"]
`

// TestIstioSidecarThroughGateway: through the real server and a gateway
// labelled app=web, a Sidecar with REGISTRY_ONLY refuses a service it does
// not import with 502 (Istio's BlackHoleCluster) while the imported one
// answers; with ALLOW_ANY the same call passes through.
func TestIstioSidecarThroughGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, _, _ := startMeshWith(t, "", 10*time.Second, func(f *gatewayFlags, _ string) {
		f.labels = map[string]string{"app": "web"}
	})
	registerOrderVersions(t, api)
	addr, _ := startEcho(t, "payments-1")
	if _, err := api.Register(ctx, client.Instance{ID: "payments-1", Service: "payments", Host: "127.0.0.1", Port: addr.Port}); err != nil {
		t.Fatal(err)
	}
	answers := func(host, prefix string) bool {
		body, code := get(t, proxy, host, "/", nil)
		return code == 200 && strings.HasPrefix(body, prefix)
	}
	waitTrue(t, 30*time.Second, func() bool { return answers("payments", "payments-1") && answers("orders", "orders-") })

	apply := func(mode string) {
		t.Helper()
		if _, err := api.ApplyConfig(ctx, []byte(strings.Replace(sidecarScope, "MODE", mode, 1)), false); err != nil {
			t.Fatal(err)
		}
	}
	apply("REGISTRY_ONLY")
	waitTrue(t, 30*time.Second, func() bool {
		_, code := get(t, proxy, "payments", "/", nil)
		return code == 502
	})
	for i := 0; i < 10; i++ {
		if body, code := get(t, proxy, "payments", "/", nil); code != 502 {
			t.Fatalf("payments, not imported, REGISTRY_ONLY: %d %q, want 502", code, body)
		}
		if body, code := get(t, proxy, "unknown.example.com", "/", nil); code != 502 {
			t.Fatalf("a host outside the registry, REGISTRY_ONLY: %d %q, want 502", code, body)
		}
		if !answers("orders", "orders-") {
			t.Fatalf("orders, imported: refused")
		}
	}

	apply("ALLOW_ANY")
	waitTrue(t, 30*time.Second, func() bool { return answers("payments", "payments-1") })
	for i := 0; i < 10; i++ {
		if body, code := get(t, proxy, "payments", "/", nil); code != 200 || !strings.HasPrefix(body, "payments-1") {
			t.Fatalf("payments, not imported, ALLOW_ANY: %d %q, want it to pass through", code, body)
		}
		if !answers("orders", "orders-") {
			t.Fatalf("orders, imported: refused")
		}
	}
}
