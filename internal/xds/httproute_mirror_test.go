package xds

import (
	"bytes"
	"testing"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

const mirrorVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: httpbin}
spec:
  hosts: [httpbin]
  http:
  - match: [{uri: {prefix: /all}}]
    route: [{destination: {host: httpbin, subset: v1}}]
    mirror: {host: httpbin, subset: v2}
  - match: [{uri: {prefix: /share}}]
    route: [{destination: {host: httpbin, subset: v1}}]
    mirror: {host: httpbin, subset: v2}
    mirrorPercentage: {value: 12.5}
  - match: [{uri: {prefix: /none}}]
    route: [{destination: {host: httpbin, subset: v1}}]
    mirror: {host: httpbin, subset: v2}
    mirrorPercentage: {value: 0}
  - route: [{destination: {host: httpbin, subset: v1}}]
    mirrors:
    - destination: {host: httpbin, subset: v2}
      percentage: {value: 50}
    - destination: {host: httpbin, subset: v3}
`

// TestMirrorAsIstio: mirror, mirrorPercentage and mirrors are published
// as Istio publishes them (request_mirror_policies, a share of a million,
// 100% when none is given, no policy for 0, trace_sampled false), pass
// go-control-plane's validation, and the hand encoder agrees.
func TestMirrorAsIstio(t *testing.T) {
	objs, err := config.Decode([]byte(mirrorVS))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "httpbin"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	vh := VirtualHost("httpbin", []string{"httpbin"}, svc, objs[0], clusterFor, nil)
	if err := RouteConfiguration("r", vh).ValidateAll(); err != nil {
		t.Fatalf("does not validate: %v", err)
	}
	type pol struct {
		cluster string
		num     uint32
		den     typev3.FractionalPercent_DenominatorType
	}
	want := [][]pol{
		{{"default/httpbin/v2", 100, typev3.FractionalPercent_HUNDRED}},
		{{"default/httpbin/v2", 125000, typev3.FractionalPercent_MILLION}},
		nil,
		{{"default/httpbin/v2", 500000, typev3.FractionalPercent_MILLION}, {"default/httpbin/v3", 100, typev3.FractionalPercent_HUNDRED}},
	}
	for i, w := range want {
		got := vh.Routes[i].GetRoute().GetRequestMirrorPolicies()
		if len(got) != len(w) {
			t.Fatalf("route %d: %v, want %v", i, got, w)
		}
		for j, p := range got {
			d := p.GetRuntimeFraction().GetDefaultValue()
			if (pol{p.GetCluster(), d.GetNumerator(), d.GetDenominator()}) != w[j] || p.GetTraceSampled() == nil || p.GetTraceSampled().GetValue() {
				t.Fatalf("route %d policy %d: %v, want %v", i, j, p, w[j])
			}
		}
	}
	enc, err := EncodeVirtualHost("httpbin", svc, objs[0], clusterFor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("httpbin", nil, svc, objs[0], clusterFor, nil)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message")
	}
}
