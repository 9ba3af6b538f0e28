package xds

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/config"
)

func TestParseServerListener(t *testing.T) {
	for name, want := range map[string]string{
		"grpc/server?xds.resource.listening_address=127.0.0.1:8080": "127.0.0.1:8080",
		"grpc/server?xds.resource.listening_address=[::]:50051":     "[::]:50051",
		"grpc/server?xds.resource.listening_address=127.0.0.1:0":    "",
		"grpc/server?xds.resource.listening_address=orders:80":      "",
		"orders:8080": "",
	} {
		ap, ok := ParseServerListener(name)
		if got := ""; ok {
			got = ap.String()
			if got != want {
				t.Errorf("%s: %s, want %q", name, got, want)
			}
		} else if want != "" {
			t.Errorf("%s: refused, want %s", name, want)
		}
	}
}

func TestServerListenerModes(t *testing.T) {
	addr := netip.MustParseAddrPort("10.0.0.5:8080")
	for _, c := range []struct {
		mode       security.PeerAuthentication_MutualTLS_Mode
		chains     []string // name/transport_protocol
		requireTLS []bool
	}{
		{security.PeerAuthentication_MutualTLS_STRICT, []string{InboundMTLSChain + "/"}, []bool{true}},
		{security.PeerAuthentication_MutualTLS_PERMISSIVE, []string{InboundMTLSChain + "/tls", InboundPlaintextChain + "/raw_buffer"}, []bool{false}},
		{security.PeerAuthentication_MutualTLS_DISABLE, []string{InboundPlaintextChain + "/"}, nil},
	} {
		l := ServerListener("n", addr, c.mode, nil)
		if sa := l.GetAddress().GetSocketAddress(); sa.GetAddress() != "10.0.0.5" || sa.GetPortValue() != 8080 {
			t.Errorf("%s: address %v", c.mode, sa)
		}
		var got []string
		var require []bool
		for _, fc := range l.FilterChains {
			got = append(got, fc.Name+"/"+fc.GetFilterChainMatch().GetTransportProtocol())
			if ts := fc.TransportSocket; ts != nil {
				d := &tlsv3.DownstreamTlsContext{}
				if err := ts.GetTypedConfig().UnmarshalTo(d); err != nil {
					t.Fatal(err)
				}
				if d.GetCommonTlsContext().GetTlsCertificateProviderInstance().GetInstanceName() != CertificateProvider ||
					d.GetCommonTlsContext().GetValidationContext().GetCaCertificateProviderInstance().GetInstanceName() != CertificateProvider {
					t.Errorf("%s: TLS context without the certificate provider: %v", c.mode, d)
				}
				require = append(require, d.GetRequireClientCertificate().GetValue())
			}
		}
		if strings.Join(got, ",") != strings.Join(c.chains, ",") || len(require) != len(c.requireTLS) || (len(require) > 0 && require[0] != c.requireTLS[0]) {
			t.Errorf("%s: chains %v require %v, want %v %v", c.mode, got, require, c.chains, c.requireTLS)
		}
	}
}

// TestRBACTranslation: DENY before ALLOW, AUDIT as LOG; each rule a
// policy; principals as SPIFFE IDs, namespaces as a regular expression
// over them, paths as url_path, conditions on the side Istio puts them.
func TestRBACTranslation(t *testing.T) {
	objs, err := config.Decode([]byte(`
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: orders}
spec:
  rules:
  - from: [{source: {principals: [cluster.local/ns/web/sa/frontend], namespaces: ["batch"]}}]
    to: [{operation: {paths: [/orders.Orders/*], notPorts: ["9090"]}}]
    when: [{key: "request.headers[x-tenant]", values: [acme]}, {key: source.ip, values: [10.0.0.0/8]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny, namespace: orders}
spec: {action: DENY, rules: [{}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: orders}
spec: {action: AUDIT, rules: [{to: [{operation: {methods: [POST]}}]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	filters := RBACFilters(objs)
	var names []string
	var actions []rbacconfigv3.RBAC_Action
	var allow *rbacconfigv3.RBAC
	for _, f := range filters {
		names = append(names, f.Name)
		r := &rbacv3.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil || f.GetTypedConfig().TypeUrl != RBACFilterType {
			t.Fatalf("%s: %v %s", f.Name, err, f.GetTypedConfig().TypeUrl)
		}
		actions = append(actions, r.Rules.Action)
		if f.Name == RBACAllowFilter {
			allow = r.Rules
		}
	}
	if strings.Join(names, ",") != RBACAuditFilter+","+RBACDenyFilter+","+RBACAllowFilter ||
		actions[0] != rbacconfigv3.RBAC_LOG || actions[1] != rbacconfigv3.RBAC_DENY || actions[2] != rbacconfigv3.RBAC_ALLOW {
		t.Fatalf("filters %v actions %v", names, actions)
	}
	p := allow.Policies["ns[orders]-policy[allow]-rule[0]"]
	if p == nil {
		t.Fatalf("policies %v", allow.Policies)
	}
	raw, _ := protojson.Marshal(p)
	var compact bytes.Buffer
	json.Compact(&compact, raw) // protojson varies its spacing on purpose
	js := compact.String()
	for _, want := range []string{`"exact":"spiffe://cluster.local/ns/web/sa/frontend"`, `"regex":"^spiffe://[^/]+/ns/batch/sa/[^/]+$"`,
		`"prefix":"/orders.Orders/"`, `"notRule"`, `"destinationPort":9090`, `"name":"x-tenant"`, `"addressPrefix":"10.0.0.0"`} {
		if !strings.Contains(js, want) {
			t.Errorf("policy lacks %s:\n%s", want, js)
		}
	}
	// Deterministic: the same policies encode the same bytes.
	a, _ := Encode(ServerListener("n", netip.MustParseAddrPort("10.0.0.5:1"), security.PeerAuthentication_MutualTLS_STRICT, objs))
	for range 5 {
		b, _ := Encode(ServerListener("n", netip.MustParseAddrPort("10.0.0.5:1"), security.PeerAuthentication_MutualTLS_STRICT, objs))
		if string(a) != string(b) {
			t.Fatal("the same listener encodes differently")
		}
	}
}

// BenchmarkServerListener: one server listener of STRICT with an ALLOW
// and a DENY policy, built and encoded (what a policy change costs per
// subscribed server).
func BenchmarkServerListener(b *testing.B) {
	objs, err := config.Decode([]byte(`
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: orders}
spec:
  rules:
  - from: [{source: {principals: [cluster.local/ns/web/sa/frontend, cluster.local/ns/web/sa/admin], namespaces: [batch]}}]
    to: [{operation: {paths: [/orders.Orders/*]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny, namespace: orders}
spec: {action: DENY, rules: [{to: [{operation: {paths: [/orders.Admin/*]}}], when: [{key: source.namespace, notValues: [ops]}]}]}
`))
	if err != nil {
		b.Fatal(err)
	}
	addr := netip.MustParseAddrPort("10.0.0.5:8080")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(ServerListener("grpc/server?xds.resource.listening_address=10.0.0.5:8080", addr, security.PeerAuthentication_MutualTLS_STRICT, objs)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestServerListenerBytes: the shared-chains encoding is the listener's
// own deterministic encoding.
func TestServerListenerBytes(t *testing.T) {
	addr := netip.MustParseAddrPort("10.0.0.5:8080")
	for _, mode := range []security.PeerAuthentication_MutualTLS_Mode{security.PeerAuthentication_MutualTLS_STRICT, security.PeerAuthentication_MutualTLS_PERMISSIVE} {
		chains, err := InboundChains(mode, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ServerListenerBytes("n", addr, chains)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := deterministic.Marshal(ServerListener("n", addr, mode, nil))
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the assembled encoding differs", mode)
		}
	}
}
