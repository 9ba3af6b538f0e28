package config_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/config"
)

// TestBindingWarnings: a VirtualService naming a Gateway that serves none
// of its hosts to its namespace (./*, ns/*), or no Gateway at all, is
// warned at apply; one the Gateway serves it (*, a bare host, its own
// namespace, or the Gateway in the same apply) is not.
func TestBindingWarnings(t *testing.T) {
	eng, tbl, closeAll := openEngine(t, t.TempDir())
	defer closeAll()
	ctx := context.Background()
	apply := func(doc string) []string {
		t.Helper()
		w := &config.ApplyWrite{Objects: mustDecode(t, doc), Table: tbl}
		if _, err := eng.Submit(ctx, w); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range w.Results {
			out = append(out, r.Warnings...)
		}
		return out
	}
	vs := func(ns, gw string) string {
		return `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: ` + ns + `}
spec:
  hosts: [shop.example.com]
  gateways: [` + gw + `]
  http: [{route: [{destination: {host: web}}]}]
`
	}
	none := func(w []string) bool {
		for _, s := range w {
			if strings.Contains(s, "spec.gateways") {
				return false
			}
		}
		return true
	}
	if w := apply(vs("team-a", "team-b/shop-gw")); len(w) != 1 || !strings.Contains(w[0], "spec.gateways[0]: Gateway team-b/shop-gw does not exist") {
		t.Fatalf("no such Gateway: %v", w)
	}
	apply(gatewayDoc("team-b", "shop-gw", 8080, "HTTP", "./*"))
	w := apply(vs("team-a", "team-b/shop-gw"))
	if len(w) != 1 || !strings.Contains(w[0], "spec.gateways[0]: Gateway team-b/shop-gw serves none of this VirtualService's hosts to namespace team-a") || strings.Contains(w[0], "./*") {
		t.Fatalf("a Gateway closed to team a: %v", w)
	}
	if w := apply(vs("team-b", "shop-gw")); !none(w) {
		t.Fatalf("the Gateway's own namespace: %v", w)
	}
	for _, h := range []string{"*", "shop.example.com", "team-a/*.example.com"} {
		apply(gatewayDoc("team-b", "shop-gw", 8080, "HTTP", h))
		if w := apply(vs("team-a", "team-b/shop-gw")); !none(w) {
			t.Fatalf("hosts %s: %v", h, w)
		}
	}
	if w := apply(gatewayDoc("team-c", "gw", 9090, "HTTP", "./*") + "---\n" + vs("team-c", "gw")); !none(w) {
		t.Fatalf("a Gateway in the same apply: %v", w)
	}
}
