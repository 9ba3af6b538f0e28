package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// TestIstioWorkloadEntry runs Istio's model of workloads outside the
// registry through the real server and gateway: a ServiceEntry whose
// workloadSelector selects WorkloadEntries (and a registered instance
// with the same labels) by label; calls to its host reach them, a deleted
// WorkloadEntry's instance stops receiving calls, and with none left the
// host has no endpoint.
func TestIstioWorkloadEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	ctx := context.Background()
	api, proxy, _ := startMesh(t)
	vmA, vmB, reg := startUpstream(t, "vm-a"), startUpstream(t, "vm-b"), startUpstream(t, "registered")
	workload := func(name string, port int) string {
		return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: %s}
spec:
  address: 127.0.0.1
  ports: {http: %d}
  labels: {app: details-legacy, instance-id: %s}
---
`, name, port, name)
	}
	const entry = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: details-svc}
spec:
  hosts: [details.bookinfo.com]
  location: MESH_INTERNAL
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: STATIC
  workloadSelector: {labels: {app: details-legacy}}
`
	if _, err := api.ApplyConfig(ctx, []byte(workload("vm-a", vmA.addr.Port)+workload("vm-b", vmB.addr.Port)+entry), false); err != nil {
		t.Fatal(err)
	}
	// Each WorkloadEntry is a registry instance of its canonical service.
	in, err := api.Get(ctx, "we:default:vm-a")
	if err != nil || in.Service != "details-legacy" || in.Port != vmA.addr.Port || !in.Healthy {
		t.Fatalf("vm-a's instance: %+v, %v", in, err)
	}
	// A registered instance with the selected labels, of another service.
	if _, err := api.Register(ctx, client.Instance{ID: "legacy-1", Service: "legacy", Host: "127.0.0.1", Port: reg.addr.Port,
		Metadata: map[string]string{"app": "details-legacy"}}); err != nil {
		t.Fatal(err)
	}
	seen := func(names ...string) func() bool {
		return func() bool {
			got := map[string]bool{}
			for range 30 {
				name, code := get(t, proxy, "details.bookinfo.com", "/details/0", nil)
				if code != http.StatusOK {
					return false
				}
				got[name] = true
			}
			for _, n := range names {
				if !got[n] {
					return false
				}
			}
			return len(got) == len(names)
		}
	}
	waitTrue(t, 20*time.Second, seen("vm-a", "vm-b", "registered"))

	// The WorkloadEntry's delete removes its instance: no call reaches it.
	if _, err := api.DeleteConfig(ctx, "WorkloadEntry", "default", "vm-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Get(ctx, "we:default:vm-a"); err == nil {
		t.Fatalf("vm-a's instance outlived its WorkloadEntry")
	}
	waitTrue(t, 20*time.Second, seen("vm-b", "registered"))
	before := vmA.calls.Load()
	for range 20 {
		if name, code := get(t, proxy, "details.bookinfo.com", "/", nil); code != http.StatusOK || name == "vm-a" {
			t.Fatalf("after vm-a's delete: %d %q", code, name)
		}
	}
	if n := vmA.calls.Load() - before; n != 0 {
		t.Fatalf("vm-a was called %d times after its delete", n)
	}

	// Re-applied with another label, vm-b leaves the selection; with the
	// registered instance gone too, the host has no endpoint.
	if _, err := api.ApplyConfig(ctx, []byte(strings.Replace(workload("vm-b", vmB.addr.Port), "app: details-legacy", "app: details-new", 1)), false); err != nil {
		t.Fatal(err)
	}
	if _, err := api.DeregisterOne(ctx, "legacy-1"); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 20*time.Second, func() bool {
		_, code := get(t, proxy, "details.bookinfo.com", "/", nil)
		return code == http.StatusServiceUnavailable
	})
	if in, err := api.Get(ctx, "we:default:vm-b"); err != nil || in.Service != "details-new" {
		t.Fatalf("vm-b's instance after its re-apply: %+v, %v", in, err)
	}
}
