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

// ordersSubsetsRule is the DestinationRule of orders' versions v1-v3
// (registerOrderVersions registers them) that the routing tests' configs
// start with.
const ordersSubsetsRule = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
  - {name: v3, labels: {version: v3}}
`

// matchConfig routes orders by Istio's HTTPMatchRequest fields beyond uri
// and headers.
const matchConfig = ordersSubsetsRule + `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - match:
    - uri: {prefix: /API}
      ignoreUriCase: true
      queryParams: {v: {exact: "2"}}
      withoutHeaders: {x-canary: {}}
      scheme: {exact: http}
      authority: {regex: "orders(:[0-9]+)?"}
    route: [{destination: {host: orders, subset: v2}}]
  - match: [{method: {exact: POST}}]
    route: [{destination: {host: orders, subset: v3}}]
  - match: [{port: 9999}]
    route: [{destination: {host: orders, subset: v3}}]
  - route: [{destination: {host: orders, subset: v1}}]
`

// TestIstioMatchFields: scheme, authority, ignoreUriCase, queryParams,
// withoutHeaders, method and port route calls through the real server and
// gateway as in Istio.
func TestIstioMatchFields(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, _ := startMesh(t)
	registerOrderVersions(t, api)
	if _, err := api.ApplyConfig(ctx, []byte(matchConfig), false); err != nil {
		t.Fatal(err)
	}
	call := func(method, host, path string, headers map[string]string) string {
		return echoName(t, proxy, method, host, path, headers)
	}
	// Until the VirtualService is in the gateway, calls go to any version
	// at random: wait for three routes to each answer as configured, three
	// times in a row (by chance: 1 in 3^9).
	waitTrue(t, 15*time.Second, func() bool {
		for range 3 {
			if call("GET", "orders", "/api/items?v=2", nil) != "orders-v2" || call("POST", "orders", "/other", nil) != "orders-v3" ||
				call("GET", "orders", "/other", nil) != "orders-v1" {
				return false
			}
		}
		return true
	})
	for _, tc := range []struct {
		name, method, host, path string
		headers                  map[string]string
		want                     string
	}{
		{"all of the first match", "GET", "orders", "/api/items?v=2", nil, "orders-v2"},
		{"path in another case", "GET", "orders", "/Api/items?a=1&v=2", nil, "orders-v2"},
		{"authority with a port", "GET", "orders:8080", "/api/items?v=2", nil, "orders-v2"},
		{"a header it must not have", "GET", "orders", "/api/items?v=2", map[string]string{"X-Canary": "1"}, "orders-v1"},
		{"another query value", "GET", "orders", "/api/items?v=3", nil, "orders-v1"},
		{"no query", "GET", "orders", "/api/items", nil, "orders-v1"},
		{"method", "POST", "orders", "/other", nil, "orders-v3"},
		{"port", "GET", "orders:9999", "/other", nil, "orders-v3"},
		{"default", "GET", "orders", "/other", nil, "orders-v1"},
	} {
		if got := call(tc.method, tc.host, tc.path, tc.headers); got != tc.want {
			t.Errorf("%s: %s %s%s answered by %q, want %q", tc.name, tc.method, tc.host, tc.path, got, tc.want)
		}
	}
}

// registerOrderVersions starts an echo server for each of orders' versions
// v1, v2 and v3 and registers it with its version label.
func registerOrderVersions(t *testing.T, api *client.Client) {
	t.Helper()
	for _, v := range []string{"v1", "v2", "v3"} {
		addr, _ := startEcho(t, "orders-"+v)
		if _, err := api.Register(context.Background(), client.Instance{ID: "orders-" + v, Service: "orders", Host: "127.0.0.1", Port: addr.Port,
			Metadata: map[string]string{"version": v}}); err != nil {
			t.Fatal(err)
		}
	}
}

// echoName sends one request through the gateway at proxy and returns the
// name of the echo server that answered.
func echoName(t *testing.T, proxy, method, host, path string, headers map[string]string) string {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+proxy+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	name, _, _ := strings.Cut(string(b), " ")
	return name
}
