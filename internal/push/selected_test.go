package push_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/xds"
)

const selectingEntry = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: details, namespace: shop}
spec:
  hosts: [details.example.com]
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: STATIC
  workloadSelector: {labels: {app: details}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: details, namespace: shop}
spec:
  host: details.example.com
  subsets: [{name: v2, labels: {version: v2}}]
`

// TestWorkloadSelectorFollowsInstances: an entry's workloadSelector
// endpoints are the matching instances of its namespace, of any service,
// recomputed on the endpoint path as each comes, changes and goes.
func TestWorkloadSelectorFollowsInstances(t *testing.T) {
	reg := registryWith(t, selectingEntry)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp := startControlPlane(t, ctx, reg, nil)
	wait := func() {
		t.Helper()
		if err := cp.engine.WaitPublished(ctx, reg.Revision()); err != nil {
			t.Fatal(err)
		}
	}
	wait()
	svc := naming.ServiceKey{Namespace: "com", Name: "details.example"}
	eds := func(subset string) []string {
		b, _, ok := cp.cache.Get(xds.TypeEndpoint, xds.ClusterName(svc, subset, 0))
		if !ok {
			return nil
		}
		var cla endpointv3.ClusterLoadAssignment
		if err := proto.Unmarshal(b, &cla); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.LbEndpoints {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, fmt.Sprintf("%s:%d", sa.Address, sa.GetPortValue()))
			}
		}
		slices.Sort(out)
		return out
	}
	check := func(step string, subset string, want ...string) {
		t.Helper()
		// WaitPublished covers the endpoint path's marks: no polling.
		wait()
		if got := eds(subset); !slices.Equal(got, want) {
			t.Errorf("%s: cluster %q has %v, want %v", step, subset, got, want)
		}
	}
	mk := func(id, ns, svc, host string, port int, md map[string]string) *instance.Instance {
		return &instance.Instance{ID: id, Namespace: ns, Service: svc, Host: host, Port: port, Weight: 1, Healthy: true, Metadata: label.FromMap(md)}
	}
	check("no instance", "")

	// A WorkloadEntry's instance: on its port of the entry port's name.
	objs, err := config.Decode([]byte("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm1, namespace: shop}\nspec: {address: 10.0.0.1, ports: {http: 9080}, labels: {app: details, version: v2}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	vm1 := config.WorkloadInstance(objs[0])
	if err := instance.Prepare(-1, vm1); err != nil {
		t.Fatal(err)
	}
	reg.Upsert(vm1)
	check("a WorkloadEntry", "", "10.0.0.1:9080")
	check("a WorkloadEntry, subset v2", "v2", "10.0.0.1:9080")

	// A registered instance of another service: its own port. Others'
	// labels or namespace do not match.
	reg.Upsert(
		mk("r1", "shop", "legacy", "10.0.0.2", 7000, map[string]string{"app": "details"}),
		mk("r2", "shop", "legacy", "10.0.0.3", 7000, map[string]string{"app": "other"}),
		mk("r3", "com", "legacy", "10.0.0.4", 7000, map[string]string{"app": "details"}),
	)
	check("registered", "", "10.0.0.1:9080", "10.0.0.2:7000")
	check("registered, subset v2", "v2", "10.0.0.1:9080")

	// Relabelled out of the selection, and deleted.
	reg.Upsert(mk("r1", "shop", "legacy", "10.0.0.2", 7000, map[string]string{"app": "gone"}))
	check("relabelled", "", "10.0.0.1:9080")
	reg.Delete(vm1.Key(), vm1.ID)
	check("deleted", "")
	check("deleted, subset v2", "v2")
}
