package xds

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// vhostCases are VirtualServices covering every field VirtualHost reads.
var vhostCases = []string{ // specs after "hosts: [orders], "
	`{http: [{route: [{destination: {host: orders}}]}]}`,
	`{http: [{name: canary, match: [{headers: {x-group: {exact: blue}, x-b: {prefix: p}, x-a: {regex: "a.*"}}}], route: [{destination: {host: orders, subset: blue}}]},
	  {route: [{destination: {host: orders, subset: stable}}]}]}`,
	`{http: [{match: [{uri: {exact: /a}}, {uri: {prefix: /b}, method: {exact: GET}}, {uri: {regex: "/c.*"}, headers: {x: {exact: ""}}}],
	  route: [{destination: {host: orders, subset: blue}, weight: 90}, {destination: {host: orders, subset: green}, weight: 10}],
	  timeout: 1.5s, retries: {attempts: 3, perTryTimeout: 200ms, retryOn: "5xx,503,gateway-error"}},
	  {route: [{destination: {host: orders}}], retries: {attempts: 0}}]}`,
	`{http: [{route: [{destination: {host: orders, subset: blue}, weight: 0}, {destination: {host: orders, subset: green}, weight: 0}, {destination: {host: orders, subset: gone}, weight: 5}], timeout: 10s},
	  {route: [{destination: {host: orders, subset: blue}, weight: 0}, {destination: {host: orders, subset: green}, weight: 5}]},
	  {route: [{destination: {host: orders, subset: gone}}, {destination: {host: orders, subset: green}, weight: 5}]},
	  {route: [{destination: {host: orders, port: {number: 8080}}, weight: 50}, {destination: {host: payments.prod, subset: blue}, weight: 50}], retries: {attempts: 2}}]}`,
	// A route with no usable destination is left out (metadata says why).
	`{http: [{route: [{destination: {host: orders, subset: gone}}]}, {route: [{destination: {host: orders}}]}]}`,
}

// TestEncodeVirtualHost: the virtual host written directly is byte for
// byte the marshalled VirtualHost, for every kind of route, and without a
// VirtualService.
func TestEncodeVirtualHost(t *testing.T) {
	svc := naming.ServiceKey{Namespace: "default", Name: "orders"}
	clusterFor := func(d config.Destination) (string, bool) {
		return ClusterName(d.Service, d.Subset, d.Port), d.Subset != "gone"
	}
	check := func(what string, vs *config.Object) {
		t.Helper()
		want, err := Encode(VirtualHost("default/orders", nil, svc, vs, clusterFor, nil))
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeVirtualHost("default/orders", svc, vs, clusterFor, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s:\nwritten    %x\nmarshalled %x", what, got, want)
		}
		// The exported path, whose first call is a sampled check.
		if got, err := EncodeVirtualHost("default/orders", svc, vs, clusterFor, nil); err != nil || !bytes.Equal(got, want) || vhostDrift.Load() {
			t.Fatalf("%s: EncodeVirtualHost %v, drift %v", what, err, vhostDrift.Load())
		}
	}
	check("no VirtualService", nil)
	for i, spec := range vhostCases {
		objs, err := config.Decode([]byte("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: orders}\nspec: {hosts: [orders], " +
			strings.TrimPrefix(strings.ReplaceAll(spec, "\n", " "), "{")))
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		check(spec, objs[0])
	}
}

// BenchmarkVirtualHost: a VirtualService of three header matches and a
// default, built and marshalled, and written directly.
func BenchmarkVirtualHost(b *testing.B) {
	svc := naming.ServiceKey{Namespace: "default", Name: "orders"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	objs, err := config.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - {match: [{headers: {x-group: {exact: blue}}}], route: [{destination: {host: orders, subset: blue}}]}
  - {match: [{headers: {x-group: {exact: green}}}], route: [{destination: {host: orders, subset: green}}]}
  - {match: [{headers: {x-group: {exact: gray}}}], route: [{destination: {host: orders, subset: gray}}]}
  - {route: [{destination: {host: orders, subset: stable}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Encode(VirtualHost("default/orders", nil, svc, objs[0], clusterFor, nil)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeVirtualHost("default/orders", svc, objs[0], clusterFor, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
