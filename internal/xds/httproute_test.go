package xds

import (
	"bytes"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

const trafficVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - match: [{headers: {end-user: {exact: jason}}}]
    fault: {delay: {percentage: {value: 100.0}, fixedDelay: 7s}}
    route: [{destination: {host: ratings, subset: v1}}]
  - fault: {abort: {percentage: {value: 12.5}, httpStatus: 500}}
    match: [{uri: {prefix: /abort}}]
    route: [{destination: {host: ratings}}]
  - match: [{uri: {prefix: /grpc}}]
    fault: {delay: {percent: 50, fixedDelay: 100ms}, abort: {grpcStatus: UNAVAILABLE}}
    route: [{destination: {host: ratings}}]
  - match: [{uri: {exact: /health}}]
    directResponse: {status: 200, body: {string: ok}}
  - match: [{uri: {exact: /teapot}}]
    directResponse: {status: 418, body: {bytes: c2hvcnQgYW5kIHN0b3V0}}
  - match: [{uri: {prefix: /one}}]
    headers: {request: {set: {x-b: "1", x-a: "2"}, add: {x-c: "3"}, remove: [x-d]}}
    route: [{destination: {host: ratings, subset: v1}, headers: {response: {set: {x-dest: v1}, remove: [x-e]}}}]
  - headers: {response: {set: {cache-control: no-store}}}
    route:
    - destination: {host: ratings, subset: v1}
      weight: 90
      headers: {request: {set: {x-version: v1}, remove: [x-debug]}, response: {add: {x-picked: v1}}}
    - destination: {host: ratings, subset: v2}
      weight: 10
`

// TestTrafficRoutesAsIstio: fault, directResponse and headers are
// published as Istio publishes them for Envoy (the route's
// typed_per_filter_config fault, direct_response, header options on the
// route and the weighted cluster, one destination's joining the route's),
// every resource passes go-control-plane's validation, and the hand
// encoder writes the same bytes.
func TestTrafficRoutesAsIstio(t *testing.T) {
	objs, err := config.Decode([]byte(trafficVS))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "ratings"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	vh := VirtualHost("ratings", []string{"ratings"}, svc, objs[0], clusterFor, nil)
	if err := vh.ValidateAll(); err != nil {
		t.Fatalf("virtual host does not validate: %v", err)
	}
	if err := RouteConfiguration("r", vh).ValidateAll(); err != nil {
		t.Fatal(err)
	}
	if len(vh.Routes) != 7 {
		t.Fatalf("%d routes, want 7", len(vh.Routes))
	}
	fault := func(i int) *faultv3.HTTPFault {
		a := vh.Routes[i].TypedPerFilterConfig[FaultFilterName]
		f := new(faultv3.HTTPFault)
		if a == nil || a.UnmarshalTo(f) != nil {
			t.Fatalf("route %d: no fault config: %v", i, vh.Routes[i])
		}
		if err := f.ValidateAll(); err != nil {
			t.Fatalf("route %d: fault does not validate: %v", i, err)
		}
		return f
	}
	million := func(n uint32) *typev3.FractionalPercent {
		return &typev3.FractionalPercent{Numerator: n, Denominator: typev3.FractionalPercent_MILLION}
	}
	if f := fault(0); f.GetDelay().GetFixedDelay().AsDuration().Seconds() != 7 || !equalPct(f.GetDelay().GetPercentage(), million(1_000_000)) || f.Abort != nil {
		t.Fatalf("delay: %v", f)
	}
	if f := fault(1); f.GetAbort().GetHttpStatus() != 500 || !equalPct(f.GetAbort().GetPercentage(), million(125_000)) {
		t.Fatalf("abort: %v", f)
	}
	if f := fault(2); !equalPct(f.GetDelay().GetPercentage(), &typev3.FractionalPercent{Numerator: 50}) ||
		f.GetAbort().GetGrpcStatus() != 14 || f.GetAbort().GetPercentage() != nil {
		t.Fatalf("grpc fault: %v", f)
	}
	if d := vh.Routes[3].GetDirectResponse(); d.GetStatus() != 200 || d.GetBody().GetInlineString() != "ok" {
		t.Fatalf("direct: %v", vh.Routes[3])
	}
	if d := vh.Routes[4].GetDirectResponse(); d.GetStatus() != 418 || string(d.GetBody().GetInlineBytes()) != "short and stout" {
		t.Fatalf("direct bytes: %v", vh.Routes[4])
	}
	one := vh.Routes[5]
	want := []*corev3.HeaderValueOption{
		{Header: &corev3.HeaderValue{Key: "x-a", Value: "2"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		{Header: &corev3.HeaderValue{Key: "x-b", Value: "1"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		{Header: &corev3.HeaderValue{Key: "x-c", Value: "3"}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
	}
	if !equalHVO(one.RequestHeadersToAdd, want) || len(one.RequestHeadersToRemove) != 1 || one.RequestHeadersToRemove[0] != "x-d" ||
		len(one.ResponseHeadersToAdd) != 1 || one.ResponseHeadersToAdd[0].Header.Key != "x-dest" ||
		len(one.ResponseHeadersToRemove) != 1 || one.ResponseHeadersToRemove[0] != "x-e" || one.GetRoute().GetCluster() == "" {
		t.Fatalf("one destination's headers join the route's: %v", one)
	}
	w := vh.Routes[6]
	cws := w.GetRoute().GetWeightedClusters().GetClusters()
	if len(cws) != 2 || cws[0].RequestHeadersToAdd[0].Header.Key != "x-version" || cws[0].RequestHeadersToRemove[0] != "x-debug" ||
		cws[0].ResponseHeadersToAdd[0].AppendAction != corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD ||
		cws[1].RequestHeadersToAdd != nil || w.ResponseHeadersToAdd[0].Header.Key != "cache-control" || w.RequestHeadersToAdd != nil {
		t.Fatalf("weighted: %v", w)
	}
	enc, err := EncodeVirtualHost("ratings", svc, objs[0], clusterFor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("ratings", nil, svc, objs[0], clusterFor, nil)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message")
	}
}

func equalPct(a, b *typev3.FractionalPercent) bool {
	return a.GetNumerator() == b.GetNumerator() && a.GetDenominator() == b.GetDenominator()
}

func equalHVO(a, b []*corev3.HeaderValueOption) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Header.Key != b[i].Header.Key || a[i].Header.Value != b[i].Header.Value || a[i].AppendAction != b[i].AppendAction {
			return false
		}
	}
	return true
}

// TestListenersListFaultFilter: every HTTP listener (a proxy's, a
// proxyless client's api_listener) lists the fault filter before the
// router, without which Envoy and grpc-go ignore a route's fault.
func TestListenersListFaultFilter(t *testing.T) {
	check := func(name string, h *hcmv3.HttpConnectionManager) {
		t.Helper()
		fs := h.GetHttpFilters()
		if len(fs) != 3 || fs[0].GetName() != CORSFilterName || !fs[0].GetIsOptional() || fs[1].GetName() != FaultFilterName ||
			fs[2].GetName() != "envoy.filters.http.router" {
			t.Fatalf("%s: filters %v", name, fs)
		}
		f := new(faultv3.HTTPFault)
		if err := fs[1].GetTypedConfig().UnmarshalTo(f); err != nil || f.Delay != nil || f.Abort != nil {
			t.Fatalf("%s: fault filter config %v %v", name, f, err)
		}
		if err := h.ValidateAll(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	api := new(hcmv3.HttpConnectionManager)
	if err := APIListener("ratings", "default/ratings").GetApiListener().GetApiListener().UnmarshalTo(api); err != nil {
		t.Fatal(err)
	}
	check("api listener", api)
	hl := HTTPListener(ProxyName, 8080, ProxyName)
	if err := hl.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	h := new(hcmv3.HttpConnectionManager)
	if err := hl.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	check("proxy listener", h)
}
