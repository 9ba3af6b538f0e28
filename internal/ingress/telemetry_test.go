package ingress

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/envoycheck"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/xds"
)

func hcmOf(t *testing.T, l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	h := &hcmv3.HttpConnectionManager{}
	if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestTelemetryListeners: a Gateway's listener gets the Telemetry that
// selects its gateway's labels in its namespace, the proxies' listener
// the mesh's; the gateway accepts both; without a Telemetry the proxies'
// listener is the push engine's, byte for byte (nobody is woken).
func TestTelemetryListeners(t *testing.T) {
	gws, _ := entries(t, `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8080, protocol: HTTP}
    hosts: ["*"]
`)
	objs, err := config.Decode([]byte(`apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  accessLogging: [{providers: [{name: envoy}]}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: edge-gw, namespace: edge}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  tracing: [{randomSamplingPercentage: 50}]
  accessLogging: [{providers: [{name: envoy-json}], filter: {expression: "response.code != 200"}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	tel := config.NewTelemetries("", objs)
	out, warns := Build(gws, nil, nil)
	if w := WithTelemetry(out, gws, tel); len(w)+len(warns) > 0 {
		t.Fatalf("warnings: %v %v", warns, w)
	}
	gl := out[1][ListenerName(8080)].(*listenerv3.Listener)
	h := hcmOf(t, gl)
	if h.GetTracing().GetRandomSampling().GetValue() != 50 || len(h.AccessLog) != 2 {
		t.Fatalf("gateway listener: tracing %v, %d access logs (want the mesh's envoy and the gateway's envoy-json)", h.GetTracing(), len(h.AccessLog))
	}
	// != 200 is an OR of <= 199 and >= 201, as Envoy's filters say it.
	or := h.AccessLog[1].GetFilter().GetOrFilter()
	if or == nil || len(or.Filters) != 2 || or.Filters[0].GetStatusCodeFilter().GetComparison().GetValue().GetDefaultValue() != 199 {
		t.Errorf("filter of != 200: %v", h.AccessLog[1].GetFilter())
	}
	pl, err := ProxyListener(15001, tel)
	if err != nil {
		t.Fatal(err)
	}
	if ph := hcmOf(t, pl); ph.GetTracing() != nil || len(ph.AccessLog) != 1 {
		t.Errorf("proxy listener: tracing %v, %d access logs; want the mesh's only", ph.GetTracing(), len(ph.AccessLog))
	}
	// Envoy's own validation rules, into the typed configs (an Envoy
	// takes them too).
	for _, l := range []*listenerv3.Listener{gl, pl} {
		if bad := envoycheck.Validate(l.Name, l); len(bad) > 0 {
			t.Errorf("Envoy would refuse %s: %v", l.Name, bad)
		}
	}
	decode := map[string]func(*anypb.Any) (string, any, error){}
	for _, typ := range gateway.XDSTypes() {
		decode[typ.URL] = typ.Decode
	}
	for _, l := range []*listenerv3.Listener{gl, pl} {
		a, _ := anypb.New(l)
		if _, _, err := decode[a.TypeUrl](a); err != nil {
			t.Errorf("%s refused by the gateway: %v", l.Name, err)
		}
	}
	plain, err := ProxyListener(15001, config.NewTelemetries("", nil))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := xds.Encode(plain)
	b, _ := xds.Encode(xds.HTTPListener(xds.ProxyName, 15001, xds.ProxyName))
	if string(a) != string(b) {
		t.Error("without a Telemetry the proxies' listener differs from the push engine's")
	}
}
