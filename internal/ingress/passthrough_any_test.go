package ingress

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/secret"
)

// TestBuildPassthroughAnyName: a TLS route's sniHosts "*" (Istio's
// multicluster sample exposing istiod) is a chain matching any server
// name on its port (no server_names), which the gateway's decoder takes.
func TestBuildPassthroughAnyName(t *testing.T) {
	gws, vss := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: istiod-gateway}
spec:
  servers:
  - port: {name: tls-istiod, number: 15012, protocol: tls}
    tls: {mode: PASSTHROUGH}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: istiod-vs}
spec:
  hosts: ["*"]
  gateways: [istiod-gateway]
  tls:
  - match: [{port: 15012, sniHosts: ["*"]}]
    route: [{destination: {host: istiod, port: {number: 15012}}}]
`)
	out, warns := Build(gws, vss, func(ns, name string) *secret.Secret { return nil })
	l, ok := out[1][ListenerName(15012)].(*listenerv3.Listener)
	if !ok {
		t.Fatalf("no listener on 15012; warnings %v", warns)
	}
	if len(l.FilterChains) != 1 || len(l.FilterChains[0].FilterChainMatch.GetServerNames()) != 0 ||
		l.FilterChains[0].FilterChainMatch.GetTransportProtocol() != "tls" {
		t.Fatalf("chains: %v", l.FilterChains)
	}
	p := new(tcpproxyv3.TcpProxy)
	if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(p); err != nil || p.GetCluster() != "default/istiod" {
		t.Fatalf("tcp_proxy %v: %v", p, err)
	}
	a, _ := anypb.New(l)
	for _, typ := range gateway.XDSTypes() {
		if typ.URL == a.TypeUrl {
			if _, _, err := typ.Decode(a); err != nil {
				t.Fatalf("refused by the gateway: %v", err)
			}
		}
	}
}
