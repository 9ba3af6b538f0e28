package ingress

import (
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/envoycheck"
)

// TestBuildTCP: Istio's tcp-echo task (a TCP Gateway server, a tcp route
// 80/20 on its port) becomes a listener whose one chain is a tcp_proxy to
// the subsets' weighted clusters, with the DestinationRule's tcp idle
// timeout; a second route with a sourceSubnet gets its own chain matched
// by source_prefix_ranges; a route for another port is left out; the
// listener passes go-control-plane's validation and Telemetry leaves it be.
func TestBuildTCP(t *testing.T) {
	gws, vss := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: tcp-echo-gateway}
spec:
  servers:
  - port: {number: 31400, name: tcp, protocol: TCP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: tcp-echo}
spec:
  hosts: ["*"]
  gateways: [tcp-echo-gateway]
  tcp:
  - match: [{port: 31400, sourceSubnet: 10.9.0.0/16}]
    route: [{destination: {host: tcp-echo, subset: v2}}]
  - match: [{port: 31400}, {port: 31401}]
    route:
    - {destination: {host: tcp-echo, port: {number: 9000}, subset: v1}, weight: 80}
    - {destination: {host: tcp-echo, port: {number: 9000}, subset: v2}, weight: 20}
  - match: [{port: 31400}]
    route: [{destination: {host: other}}]
`)
	drObjs, err := config.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: tcp-echo}
spec:
  host: tcp-echo
  trafficPolicy: {connectionPool: {tcp: {idleTimeout: 30s}}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`))
	if err != nil {
		t.Fatal(err)
	}
	out, warns := BuildWithPolicies(gws, vss, []*config.Entry{{Object: drObjs[0]}}, nil, nil)
	if w := strings.Join(warns, "\n"); !strings.Contains(w, "VirtualService/default/tcp-echo spec.tcp[2]: port 31400: the same match is already routed by VirtualService/default/tcp-echo spec.tcp[1]") {
		t.Errorf("warnings: %s", w)
	}
	name := ListenerName(31400)
	if _, ok := out[2][name]; ok {
		t.Error("a TCP port has a RouteConfiguration")
	}
	l := out[1][name].(*listenerv3.Listener)
	if bad := envoycheck.Validate(name, l); len(bad) > 0 {
		t.Fatalf("invalid for Envoy: %v", bad)
	}
	if len(l.FilterChains) != 2 {
		t.Fatalf("%d chains, want 2: %v", len(l.FilterChains), l.FilterChains)
	}
	src := l.FilterChains[0].FilterChainMatch.GetSourcePrefixRanges()
	if len(src) != 1 || src[0].AddressPrefix != "10.9.0.0" || src[0].PrefixLen.GetValue() != 16 {
		t.Errorf("first chain's source ranges: %v", src)
	}
	p := new(tcpproxyv3.TcpProxy)
	if err := l.FilterChains[1].Filters[0].GetTypedConfig().UnmarshalTo(p); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range p.GetWeightedClusters().GetClusters() {
		got = append(got, c.Name)
	}
	if strings.Join(got, ",") != "default/tcp-echo/v1,default/tcp-echo/v2" || p.GetWeightedClusters().GetClusters()[0].Weight != 80 {
		t.Errorf("weighted clusters: %v", p.GetWeightedClusters())
	}
	if p.GetIdleTimeout().AsDuration() != 30*time.Second {
		t.Errorf("idle timeout %v, want the DestinationRule's 30s", p.GetIdleTimeout())
	}
	if w := WithTelemetry(out, gws, config.NewTelemetries("sextant-system", nil)); len(w) > 0 {
		t.Errorf("telemetry: %v", w)
	}
}
