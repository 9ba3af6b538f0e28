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

// gatewayRouting binds a VirtualService with a named route to a subset to
// an Istio Gateway on the gateway's plain port.
const gatewayRouting = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: http, protocol: HTTP}
    hosts: [shop.example.com]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets:
  - {name: v1, labels: {version: v1}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [shop-gw]
  http:
  - name: buy
    route: [{destination: {host: orders, subset: v1}}]
`

// A call through a Gateway-bound VirtualService is recorded with its route
// and subset, as a call through the mesh's routes is: the Calls page shows
// them.
func TestGatewayBoundCallRecordsRouteAndSubset(t *testing.T) {
	api, proxy, admin, server := startMeshTLS(t, "")
	up := startUpstream(t, "orders-v1")
	if _, err := api.Register(context.Background(), client.Instance{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: up.addr.Port, Version: "v1"}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(proxy)
	var p int
	fmt.Sscan(port, &p)
	if out, err := runOn(t, server, fmt.Sprintf(gatewayRouting, p), "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	waitTrue(t, 15*time.Second, func() bool {
		req, _ := http.NewRequest("GET", "http://"+proxy+"/buy", nil)
		req.Host = "shop.example.com"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && string(b) == "orders-v1"
	})
	var calls struct {
		Calls []client.Call `json:"calls"`
	}
	waitTrue(t, 15*time.Second, func() bool {
		resp, err := http.Get("http://" + admin + "/v1/calls?service=default/orders&from=0")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&calls) == nil && len(calls.Calls) > 0 && calls.Calls[len(calls.Calls)-1].Status == 200
	})
	c := calls.Calls[len(calls.Calls)-1]
	if c.Route != "buy" || c.Subset == "" {
		t.Fatalf("the call through the Gateway is recorded with route %q, subset %q: %+v", c.Route, c.Subset, c)
	}
}
