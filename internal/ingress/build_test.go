package ingress

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/secret/secrettest"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/xds"
)

func testSecret(t *testing.T, ns, name string, withCA bool) *secret.Secret {
	t.Helper()
	c, k := secrettest.Pair(t, time.Now().Add(time.Hour), "a.example.com")
	var ca []byte
	if withCA {
		ca = c
	}
	s, err := secret.New(ns, name, c, k, ca, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func entries(t *testing.T, yaml string) (gws, vss []*config.Entry) {
	t.Helper()
	objs, err := config.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		e := &config.Entry{Object: o}
		if o.Gateway != nil {
			gws = append(gws, e)
		} else {
			vss = append(vss, e)
		}
	}
	return gws, vss
}

// TestBuildIsServedByTheGateway: what Build publishes for a Gateway with a
// MUTUAL and a SIMPLE HTTPS server on one port and a redirecting HTTP
// server is accepted by the gateway's decoders; a missing secret and a
// port two Gateways use differently are warned about.
func TestBuildIsServedByTheGateway(t *testing.T) {
	gws, vss := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: edge}
spec:
  servers:
  - port: {number: 8443, protocol: HTTPS}
    hosts: [a.example.com]
    tls: {mode: MUTUAL, credentialName: a-cert}
  - port: {number: 8443, protocol: HTTPS}
    hosts: ["*.b.example.com"]
    tls: {mode: SIMPLE, credentialName: missing}
  - port: {number: 8080, protocol: HTTP}
    hosts: ["*"]
    tls: {httpsRedirect: true}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: other, namespace: edge}
spec:
  servers:
  - port: {number: 8080, protocol: HTTPS}
    hosts: [c.example.com]
    tls: {mode: SIMPLE, credentialName: a-cert}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop, namespace: edge}
spec:
  hosts: [a.example.com, x.b.example.com, elsewhere.example.com]
  gateways: [gw]
  http:
  - route: [{destination: {host: orders.default, subset: v1}}]
`)
	secrets := map[string]*secret.Secret{"edge/a-cert": testSecret(t, "edge", "a-cert", true)}
	out, warns := Build(gws, vss, func(ns, name string) *secret.Secret { return secrets[ns+"/"+name] })
	w := strings.Join(warns, "\n")
	if !strings.Contains(w, `credentialName "missing": no such secret`) || !strings.Contains(w, "port 8080 is already plaintext") {
		t.Errorf("warnings: %s", w)
	}
	if len(out[0]) != 2 || out[0]["edge/a-cert"] == nil || out[0]["edge/a-cert-cacert"] == nil {
		t.Errorf("secrets: %v", out[0])
	}
	decode := map[string]func(*anypb.Any) (string, any, error){}
	for _, typ := range gateway.XDSTypes() {
		decode[typ.URL] = typ.Decode
	}
	for _, m := range out {
		for name, r := range m {
			a, _ := anypb.New(r)
			if _, _, err := decode[a.TypeUrl](a); err != nil {
				t.Errorf("%s %s refused by the gateway: %v", a.TypeUrl, name, err)
			}
		}
	}
	if s := out[0]["edge/a-cert-cacert"].(*tlsv3.Secret); s.GetValidationContext() == nil {
		t.Error("the CA secret holds no validation context")
	}
	// Its chains match server_names: Envoy needs the TLS inspector to read them.
	if l := out[1][ListenerName(8443)].(*listenerv3.Listener); !xds.HasTLSInspector(l) {
		t.Errorf("listener of 8443 matches server_names without %s: %v", xds.TLSInspector, l.ListenerFilters)
	}
	rc := out[2][ListenerName(8443)].(*routev3.RouteConfiguration)
	if len(rc.VirtualHosts) != 1 || strings.Join(rc.VirtualHosts[0].Domains, ",") != "a.example.com,x.b.example.com" ||
		rc.VirtualHosts[0].Routes[0].GetRoute().GetCluster() != "default/orders/v1" {
		t.Errorf("routes of 8443: %v", rc)
	}
	redirect := out[2][ListenerName(8080)].(*routev3.RouteConfiguration)
	if len(redirect.VirtualHosts) != 1 || !redirect.VirtualHosts[0].Routes[0].GetRedirect().GetHttpsRedirect() {
		t.Errorf("routes of 8080: %v", redirect)
	}
}

// An expired certificate is still published (rotating it is the fix) and
// warned about.
func TestBuildWarnsOfExpiredCertificate(t *testing.T) {
	gws, vss := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  servers:
  - port: {number: 443, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: SIMPLE, credentialName: old}
`)
	c, k := secrettest.Pair(t, time.Now().Add(-time.Hour), "a.example.com")
	old, err := secret.New("default", "old", c, k, nil, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	out, warns := Build(gws, vss, func(string, string) *secret.Secret { return old })
	if out[0]["default/old"] == nil || len(warns) != 1 || !strings.Contains(warns[0], "secret default/old expired at") {
		t.Errorf("warnings %q, secrets %v", warns, out[0])
	}
}

// TestBuildGatewayRBAC: an AuthorizationPolicy selecting a Gateway's
// workloads (its spec.selector) puts its RBAC filters before the router
// of every listener the Gateway serves on; another Gateway's port gets
// none; the gateway's decoder still accepts the listener.
func TestBuildGatewayRBAC(t *testing.T) {
	gws, vss := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8080, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: internal, namespace: edge}
spec:
  selector: {istio: internal}
  servers:
  - port: {number: 9090, protocol: HTTP}
    hosts: ["*"]
`)
	objs, err := config.Decode([]byte(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: block-admin, namespace: edge}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{to: [{operation: {paths: [/admin*]}}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	out, warns := BuildWithPolicies(gws, vss, nil, config.NewSecurity("", objs), func(string, string) *secret.Secret { return nil })
	if len(warns) != 0 {
		t.Fatalf("warnings: %v", warns)
	}
	filters := func(port uint32) []string {
		l := out[1][ListenerName(port)].(*listenerv3.Listener)
		h := &hcmv3.HttpConnectionManager{}
		if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(h); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range h.HttpFilters {
			names = append(names, f.Name)
		}
		a, _ := anypb.New(l)
		for _, typ := range gateway.XDSTypes() {
			if typ.URL == a.TypeUrl {
				if _, _, err := typ.Decode(a); err != nil {
					t.Errorf("the gateway refuses listener %d: %v", port, err)
				}
			}
		}
		return names
	}
	if got := strings.Join(filters(8080), ","); got != xds.RBACDenyFilter+","+xds.CORSFilterName+","+xds.FaultFilterName+",envoy.filters.http.router" {
		t.Errorf("port 8080 filters: %s", got)
	}
	if got := strings.Join(filters(9090), ","); got != xds.CORSFilterName+","+xds.FaultFilterName+",envoy.filters.http.router" {
		t.Errorf("port 9090 filters: %s", got)
	}
	// GatewayRBAC names the same filters per port, for a dry run.
	byPort := GatewayRBAC(gws, vss, config.NewSecurity("", objs))
	if len(byPort) != 2 || len(byPort[8080]) != 1 || byPort[8080][0].Name != xds.RBACDenyFilter || len(byPort[9090]) != 0 {
		t.Errorf("GatewayRBAC: %v", byPort)
	}
}

// TestBuildPassthrough: a PASSTHROUGH server and the TLS routes bound to it
// become filter chains matching the routes' sniHosts on a TLS ClientHello,
// each a tcp_proxy to the destination's cluster (weighted when several),
// beside the port's terminating chain; the gateway's decoder takes them.
// A sniHost served twice is warned about and kept once.
func TestBuildPassthrough(t *testing.T) {
	gws, vss := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  servers:
  - port: {number: 443, protocol: TLS}
    hosts: ["*.example.com"]
    tls: {mode: PASSTHROUGH}
  - port: {number: 443, protocol: HTTPS}
    hosts: [a.example.org]
    tls: {mode: SIMPLE, credentialName: a-cert}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db}
spec:
  hosts: ["*.example.com"]
  gateways: [gw]
  tls:
  - match: [{sniHosts: [db.example.com]}]
    route:
    - {destination: {host: db, subset: v1}, weight: 90}
    - {destination: {host: db, subset: v2}, weight: 10}
  - match: [{sniHosts: [vault.example.com, db.example.com]}]
    route: [{destination: {host: vault}}]
`)
	out, warns := Build(gws, vss, func(ns, name string) *secret.Secret { return testSecret(t, ns, name, false) })
	if w := strings.Join(warns, "\n"); !strings.Contains(w, `server name "db.example.com" is already served on port 443`) {
		t.Errorf("warnings: %s", w)
	}
	l := out[1][ListenerName(443)].(*listenerv3.Listener)
	a, _ := anypb.New(l)
	var decode func(*anypb.Any) (string, any, error)
	for _, typ := range gateway.XDSTypes() {
		if typ.URL == a.TypeUrl {
			decode = typ.Decode
		}
	}
	if _, _, err := decode(a); err != nil {
		t.Fatalf("refused by the gateway: %v", err)
	}
	want := map[string]string{"db.example.com": "default/db/v1:90,default/db/v2:10", "vault.example.com": "default/vault"}
	got := map[string]string{}
	terminating := 0
	for _, fc := range l.FilterChains {
		if fc.TransportSocket != nil {
			terminating++
			continue
		}
		if fc.FilterChainMatch.GetTransportProtocol() != "tls" {
			t.Errorf("chain %v: not matched on TLS", fc.FilterChainMatch)
		}
		p := new(tcpproxyv3.TcpProxy)
		if err := fc.Filters[0].GetTypedConfig().UnmarshalTo(p); err != nil {
			t.Fatal(err)
		}
		var dst []string
		if c := p.GetCluster(); c != "" {
			dst = append(dst, c)
		}
		for _, w := range p.GetWeightedClusters().GetClusters() {
			dst = append(dst, fmt.Sprintf("%s:%d", w.Name, w.Weight))
		}
		for _, n := range fc.FilterChainMatch.ServerNames {
			got[n] = strings.Join(dst, ",")
		}
	}
	if terminating != 1 || !maps.Equal(got, want) {
		t.Errorf("chains: %d terminating, passthrough %v; want %v", terminating, got, want)
	}
}
