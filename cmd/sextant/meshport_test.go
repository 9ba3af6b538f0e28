package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// TestGatewayServerBesideMesh: a gateway on --listen serves the mesh
// (Host: orders). An Istio Gateway with an HTTP server on that same port
// (docs/controlplane.md's shop-gw on 8080) adds its hosts to the port, as
// Istio serves one listener by host: shop.example.com goes by the
// Gateway's VirtualService, orders still by the mesh's routes, and a host
// neither names gets 404; without the Gateway the mesh alone again.
func TestGatewayServerBesideMesh(t *testing.T) {
	api, proxy, admin, server := startMeshTLS(t, "")
	ctx := context.Background()
	for _, svc := range []string{"orders", "shop"} {
		up := startUpstream(t, svc)
		if _, err := api.Register(ctx, client.Instance{ID: svc + "-1", Service: svc, Host: "127.0.0.1", Port: up.addr.Port}); err != nil {
			t.Fatal(err)
		}
	}
	waitTrue(t, 15*time.Second, func() bool { body, code := get(t, proxy, "orders", "/", nil); return code == 200 && body == "orders" })
	_, port, _ := net.SplitHostPort(proxy)
	gw := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw}
spec:
  servers:
  - port: {number: %s, name: http, protocol: HTTP}
    hosts: [shop.example.com]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [shop-gw]
  http:
  - route: [{destination: {host: shop}}]
`, port)
	if out, err := runOn(t, server, gw, "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool {
		body, code := get(t, proxy, "shop.example.com", "/", nil)
		return code == 200 && body == "shop"
	})
	for _, c := range []struct {
		host, body string
		code       int
	}{{"orders", "orders", 200}, {"orders.default", "orders", 200}, {"shop.example.com", "shop", 200}, {"nobody.example.com", "", 404}} {
		body, code := get(t, proxy, c.host, "/", nil)
		if code != c.code || c.code == 200 && body != c.body {
			t.Errorf("Host: %s beside the Gateway: %d %q, want %d %q", c.host, code, body, c.code, c.body)
		}
	}
	// The gateway's admin API says the port serves both.
	resp, err := http.Get("http://" + admin + "/v1/config")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Listener, RouteConfig, MeshRouteConfig string
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &struct {
		Listener        *string `json:"listener"`
		RouteConfig     *string `json:"route_config"`
		MeshRouteConfig *string `json:"mesh_route_config"`
	}{&cfg.Listener, &cfg.RouteConfig, &cfg.MeshRouteConfig}); err != nil {
		t.Fatal(err)
	}
	if cfg.Listener != "sextant-gateway-"+port || cfg.RouteConfig != cfg.Listener || cfg.MeshRouteConfig != "sextant-http" {
		t.Errorf("admin /v1/config: %+v", cfg)
	}
	if out, err := runOn(t, server, "", "config", "delete", "gateway/default/shop-gw"); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool { _, code := get(t, proxy, "shop.example.com", "/", nil); return code == 404 })
	if body, code := get(t, proxy, "orders", "/", nil); code != 200 || body != "orders" {
		t.Errorf("Host: orders after the Gateway's delete: %d %q", code, body)
	}
}
