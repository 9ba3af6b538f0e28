package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// delegateConfig chains VirtualServices as Istio: orders' /api routes are
// delegated to orders-api (no hosts), whose routes' matches merge with
// /api; its /other route is not within /api and is left out.
const delegateConfig = ordersSubsetsRule + `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - match: [{uri: {prefix: /api}}]
    delegate: {name: orders-api}
  - route: [{destination: {host: orders, subset: v1}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders-api}
spec:
  http:
  - match: [{headers: {end-user: {exact: jason}}}]
    route: [{destination: {host: orders, subset: v2}}]
  - match: [{uri: {prefix: /other}}]
    route: [{destination: {host: orders, subset: v2}}]
  - route: [{destination: {host: orders, subset: v3}}]
`

// TestIstioDelegate: a root VirtualService's delegate route hands /api to
// the delegate's routes through the real server and gateway, with the
// matches merged as Istio merges them, and a change of the delegate alone
// reaches the root's routes.
func TestIstioDelegate(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, _ := startMesh(t)
	registerOrderVersions(t, api)
	res, err := api.ApplyConfig(ctx, []byte(delegateConfig), false)
	if err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, r := range res.Results {
		for _, w := range r.Warnings {
			warned = warned || strings.Contains(w, "its matches are not within the root route's")
		}
	}
	if !warned {
		t.Errorf("no warning for the delegate route outside /api: %+v", res)
	}
	call := func(path string, headers map[string]string) string {
		return echoName(t, proxy, "GET", "orders", path, headers)
	}
	jason := map[string]string{"End-User": "jason"}
	// Until the routes are in the gateway, calls go to any version: wait
	// for each route to answer as configured three times in a row.
	waitTrue(t, 15*time.Second, func() bool {
		for range 3 {
			if call("/api/items", jason) != "orders-v2" || call("/api/items", nil) != "orders-v3" || call("/other", nil) != "orders-v1" {
				return false
			}
		}
		return true
	})
	for _, tc := range []struct {
		name, path string
		headers    map[string]string
		want       string
	}{
		{"delegate's header match within /api", "/api/items", jason, "orders-v2"},
		{"delegate's default within /api", "/api", nil, "orders-v3"},
		{"header outside /api: root's default", "/items", jason, "orders-v1"},
		{"delegate route outside /api left out", "/other", nil, "orders-v1"},
	} {
		if got := call(tc.path, tc.headers); got != tc.want {
			t.Errorf("%s: GET %s answered by %q, want %q", tc.name, tc.path, got, tc.want)
		}
	}
	// Changing the delegate alone changes the root's routes.
	changed := strings.Replace(delegateConfig, "  - route: [{destination: {host: orders, subset: v3}}]", "  - route: [{destination: {host: orders, subset: v1}}]", 1)
	if _, err := api.ApplyConfig(ctx, []byte(changed), false); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 15*time.Second, func() bool {
		for range 3 {
			if call("/api/items", nil) != "orders-v1" || call("/api/items", jason) != "orders-v2" {
				return false
			}
		}
		return true
	})
}
