package ingress

import (
	"maps"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/secret"
)

// TestBuildAutoPassthrough: an AUTO_PASSTHROUGH server becomes one chain
// per service, port and subset its hosts expose, matching Istio's
// outbound_.PORT_.SUBSET_.HOST names of the host forms the server's hosts
// match (a namespace-scoped host exposes that namespace's services only),
// each a tcp_proxy to the service's or subset's cluster; the gateway's
// decoder takes them.
func TestBuildAutoPassthrough(t *testing.T) {
	gws, rest := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: eastwest}
spec:
  servers:
  - port: {number: 15443, protocol: TLS}
    hosts: ["*.local", "team-b/*"]
    tls: {mode: AUTO_PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews}
spec:
  host: reviews
  subsets: [{name: v1, labels: {version: v1}}]
`)
	svcs := []ServicePorts{
		{Service: naming.ServiceKey{Namespace: "default", Name: "reviews"}, Ports: []uint32{9080, 9443}},
		{Service: naming.ServiceKey{Namespace: "team-b", Name: "db"}, Ports: []uint32{5432}},
	}
	noSecret := func(ns, name string) *secret.Secret { return nil }
	// The Gateway is in the root namespace ("default" here): every
	// namespace's services.
	out, warns := BuildWithServices(gws, nil, rest, nil, noSecret, svcs, "default")
	if w := strings.Join(warns, "\n"); len(warns) != 1 || !strings.Contains(w, "the instances of default/reviews listen on several ports ([9080 9443])") {
		t.Errorf("warnings: %s", w)
	}
	l := out[1][ListenerName(15443)].(*listenerv3.Listener)
	if err := l.ValidateAll(); err != nil {
		t.Errorf("ValidateAll: %v", err)
	}
	a, _ := anypb.New(l)
	for _, typ := range gateway.XDSTypes() {
		if typ.URL == a.TypeUrl {
			if _, _, err := typ.Decode(a); err != nil {
				t.Fatalf("refused by the gateway: %v", err)
			}
		}
	}
	got := map[string]string{}
	for _, fc := range l.FilterChains {
		if fc.FilterChainMatch.GetTransportProtocol() != "tls" || fc.TransportSocket != nil {
			t.Errorf("chain %v: not a passthrough chain", fc.FilterChainMatch)
		}
		p := new(tcpproxyv3.TcpProxy)
		if err := fc.Filters[0].GetTypedConfig().UnmarshalTo(p); err != nil {
			t.Fatal(err)
		}
		for _, n := range fc.FilterChainMatch.ServerNames {
			got[n] = p.GetCluster()
		}
	}
	want := map[string]string{
		"outbound_.9080_._.reviews.default.svc.cluster.local":   "default/reviews",
		"outbound_.9080_.v1_.reviews.default.svc.cluster.local": "default/reviews/v1",
		"outbound_.9443_._.reviews.default.svc.cluster.local":   "default/reviews",
		"outbound_.9443_.v1_.reviews.default.svc.cluster.local": "default/reviews/v1",
		// team-b/*: every form of team-b's services.
		"outbound_.5432_._.db.team-b":                   "team-b/db",
		"outbound_.5432_._.db.team-b.svc":               "team-b/db",
		"outbound_.5432_._.db.team-b.svc.cluster.local": "team-b/db",
	}
	if !maps.Equal(got, want) {
		t.Errorf("server names -> clusters:\n got %v\nwant %v", got, want)
	}
	if n := len(chainNames(t, out)); n != len(want) {
		t.Errorf("%d names", n)
	}
	// A Gateway of another namespace than the root's exposes its own
	// namespace's services only: team-b's db is not, though a host names it.
	out, _ = BuildWithServices(gws, nil, rest, nil, noSecret, svcs, "")
	for n := range chainNames(t, out) {
		if strings.Contains(n, "team-b") {
			t.Errorf("%s published by a Gateway of namespace default", n)
		}
	}
	if n := len(chainNames(t, out)); n != 4 {
		t.Errorf("%d names from namespace default's Gateway; want reviews' 4", n)
	}

	// No service it exposes: a warning, no chain.
	_, warns = BuildWithServices(gws, nil, rest, nil, noSecret, nil, "")
	if w := strings.Join(warns, "\n"); !strings.Contains(w, "AUTO_PASSTHROUGH: no registered service") {
		t.Errorf("warnings: %s", w)
	}
	if !hasAuto(gws) || hasAuto([]*config.Entry{}) {
		t.Error("hasAuto")
	}
}

// chainNames is the server names of the 15443 listener's chains.
func chainNames(t *testing.T, out [3]map[string]proto.Message) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, fc := range out[1][ListenerName(15443)].(*listenerv3.Listener).FilterChains {
		for _, n := range fc.FilterChainMatch.GetServerNames() {
			names[n] = true
		}
	}
	return names
}
