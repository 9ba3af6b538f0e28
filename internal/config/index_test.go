package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sextant-mesh/sextant/internal/naming"
)

func mustDecode(t testing.TB, s string) *Object {
	t.Helper()
	objs, err := Decode([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return objs[0]
}

func vsYAML(ns, name, host string, dests ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: %s, namespace: %s}\nspec:\n  hosts: [%s]\n  http:\n", name, ns, host)
	for _, d := range dests {
		h, subset, _ := strings.Cut(d, "/")
		fmt.Fprintf(&b, "  - route: [{destination: {host: %s, subset: %q}}]\n", h, subset)
	}
	return b.String()
}

func drYAML(ns, name, host string, subsets ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: %s, namespace: %s}\nspec:\n  host: %s\n  subsets:\n", name, ns, host)
	for _, s := range subsets {
		fmt.Fprintf(&b, "  - {name: %s, labels: {v: %s}}\n", s, s)
	}
	return b.String()
}

func TestIndex(t *testing.T) {
	ix := NewIndex()
	sk := func(ns, n string) naming.ServiceKey { return naming.ServiceKey{Namespace: ns, Name: n} }
	front := mustDecode(t, vsYAML("shop", "front", "front", "orders.default/v1", "orders.default"))
	if got := ix.Put(front); !cmp.Equal(got, []naming.ServiceKey{sk("default", "orders"), sk("shop", "front")}) {
		t.Fatalf("put front touched %v", got)
	}
	if got := ix.RoutesTo(sk("default", "orders")); !cmp.Equal(got, []naming.ServiceKey{sk("shop", "front")}) {
		t.Fatalf("routes to orders: %v", got)
	}
	if got := ix.DestinationsOf(sk("default", "orders")); len(got) != 2 || got[0].Subset != "" || got[1].Subset != "v1" {
		t.Fatalf("destinations of orders: %v", got)
	}
	if w := ix.Warnings(front); len(w) != 1 || !strings.Contains(w[0], `subset "v1"`) {
		t.Fatalf("warnings %v", w)
	}
	// A DestinationRule for orders touches orders and the hosts routing there.
	dr := mustDecode(t, drYAML("default", "orders", "orders", "v1"))
	if got := ix.Put(dr); !cmp.Equal(got, []naming.ServiceKey{sk("default", "orders"), sk("shop", "front")}) {
		t.Fatalf("put dr touched %v", got)
	}
	if ix.DestinationRule(sk("default", "orders")) != dr || len(ix.Warnings(front)) != 0 {
		t.Fatal("dr not in force")
	}
	// A second VirtualService for front sorts after and is shadowed.
	other := mustDecode(t, vsYAML("shop", "zfront", "front", "front"))
	if w := ix.Warnings(other); len(w) != 1 || !strings.Contains(w[0], "shadowed") {
		t.Fatalf("warnings %v", w)
	}
	ix.Put(other)
	if ix.VirtualService(sk("shop", "front")) != front {
		t.Fatal("wrong VirtualService in force")
	}
	// Replacing front so it no longer routes to orders touches orders too.
	front2 := mustDecode(t, vsYAML("shop", "front", "front", "front"))
	if got := ix.Put(front2); !cmp.Equal(got, []naming.ServiceKey{sk("default", "orders"), sk("shop", "front")}) {
		t.Fatalf("replace touched %v", got)
	}
	if got := ix.RoutesTo(sk("default", "orders")); len(got) != 0 {
		t.Fatalf("routes to orders after replace: %v", got)
	}
	if got := ix.Delete(front2.Key); !cmp.Equal(got, []naming.ServiceKey{sk("shop", "front")}) {
		t.Fatalf("delete touched %v", got)
	}
	if ix.VirtualService(sk("shop", "front")) != other {
		t.Fatal("shadowed VirtualService not in force after delete")
	}
	if ix.Delete(front2.Key) != nil || ix.Len() != 2 {
		t.Fatal("second delete")
	}
}

// BenchmarkIndexPut: applying one rule costs the same with 2,200 services
// configured as with none (no services x rules scan).
func BenchmarkIndexPut(b *testing.B) {
	ix := NewIndex()
	for i := range 2200 {
		ix.Put(mustDecode(b, vsYAML("default", fmt.Sprintf("s%d", i), fmt.Sprintf("s%d", i), fmt.Sprintf("s%d/blue", i), fmt.Sprintf("s%d/stable", i))))
		ix.Put(mustDecode(b, drYAML("default", fmt.Sprintf("s%d", i), fmt.Sprintf("s%d", i), "blue", "stable")))
	}
	o := mustDecode(b, drYAML("default", "s7", "s7", "blue", "green", "stable"))
	b.ReportAllocs()
	for b.Loop() {
		ix.Put(o)
	}
}

// TestIndexGatewayRoutesToWhole: a VirtualService bound to Gateways only
// that routes to a service as a whole makes the index say so (the push
// engine then publishes the service's own cluster, which the mesh's routes
// to subsets do not name), and touches that service on put and delete.
func TestIndexGatewayRoutesToWhole(t *testing.T) {
	ix := NewIndex()
	orders := naming.ServiceKey{Namespace: "default", Name: "orders"}
	mesh := mustDecode(t, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http: [{route: [{destination: {host: orders, subset: v1}}]}]
`)
	ix.Put(mesh)
	if ix.GatewayRoutesToWhole(orders) {
		t.Fatal("a mesh route to a subset counted")
	}
	edge := mustDecode(t, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [edge]
  http: [{route: [{destination: {host: orders}}]}]
`)
	if touched := ix.Put(edge); !slices.Contains(touched, orders) {
		t.Errorf("put touched %v, want %v", touched, orders)
	}
	if !ix.GatewayRoutesToWhole(orders) {
		t.Fatal("the gateway's route to the whole service is not seen")
	}
	if touched := ix.Delete(edge.Key); !slices.Contains(touched, orders) || ix.GatewayRoutesToWhole(orders) {
		t.Errorf("delete touched %v; still routed: %v", touched, ix.GatewayRoutesToWhole(orders))
	}
}
