package push_test

import (
	"context"
	"fmt"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	grpcxds "google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/xds"
)

// dialTarget is dial for another xds:/// target.
func dialTarget(t *testing.T, cp *controlPlane, node, target string) *grpc.ClientConn {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "metadata": {"NAMESPACE": "default"}}
	}`, cp.addr, node)
	resolver, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, grpc.WithResolvers(resolver), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestServiceEntryResources: what the push engine publishes for a
// ServiceEntry. STATIC: an EDS cluster whose assignment holds the entry's
// endpoints (a DestinationRule's subsets select them by label; locality
// from the endpoint); DNS: a STRICT_DNS cluster with the host name in its
// load_assignment and no EDS resource.
func TestServiceEntryResources(t *testing.T) {
	reg := registryWith(t, `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db}
spec:
  hosts: [db.corp.example]
  ports: [{number: 5432, name: pg, protocol: TCP, targetPort: 15432}]
  resolution: STATIC
  endpoints:
  - {address: 10.1.0.1, labels: {version: v1}, locality: eu/eu-a}
  - {address: 10.1.0.2, labels: {version: v2}, weight: 5}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db}
spec:
  host: db.corp.example
  subsets: [{name: v2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: web}
spec:
  hosts: [www.web.example]
  ports: [{number: 80, name: http, protocol: HTTP}, {number: 443, name: https, protocol: HTTPS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web}
spec:
  hosts: [www.web.example]
  http:
  - match: [{uri: {prefix: /tls}}]
    route: [{destination: {host: www.web.example, port: {number: 443}}}]
  - route: [{destination: {host: www.web.example}}]
`)
	cp := startControlPlane(t, context.Background(), reg, nil)
	c := cp.cache
	assignment := func(name string) *endpointv3.ClusterLoadAssignment {
		b, _, ok := c.Get(xds.TypeEndpoint, name)
		if !ok {
			return nil
		}
		var cla endpointv3.ClusterLoadAssignment
		if err := proto.Unmarshal(b, &cla); err != nil {
			t.Fatal(err)
		}
		return &cla
	}
	addrs := func(cla *endpointv3.ClusterLoadAssignment) []string {
		var out []string
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.LbEndpoints {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, fmt.Sprintf("%s:%d@%s/%s w%d", sa.Address, sa.GetPortValue(), l.Locality.GetRegion(), l.Locality.GetZone(), e.LoadBalancingWeight.GetValue()))
			}
		}
		return out
	}
	waitFor(t, func() bool {
		return len(addrs(assignment("example/db.corp/v2"))) == 1 && len(addrs(assignment("example/db.corp"))) == 2
	})
	if got := fmt.Sprint(addrs(assignment("example/db.corp"))); got != "[10.1.0.2:15432@/ w5 10.1.0.1:15432@eu/eu-a w1]" {
		t.Errorf("whole service: %s", got)
	}
	if got := fmt.Sprint(addrs(assignment("example/db.corp/v2"))); got != "[10.1.0.2:15432@/ w5]" {
		t.Errorf("subset v2: %s", got)
	}
	// The whole service's cluster is on the entry's first port; a route
	// naming the other port has its own.
	for name, port := range map[string]uint32{"example/www.web": 80, "example/www.web:443": 443} {
		var web clusterv3.Cluster
		waitFor(t, func() bool { return hasCluster(c, name) })
		b, _, _ := c.Get(xds.TypeCluster, name)
		if err := proto.Unmarshal(b, &web); err != nil {
			t.Fatal(err)
		}
		if err := web.ValidateAll(); err != nil {
			t.Fatal(err)
		}
		lbs := web.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()
		sa := lbs[0].GetEndpoint().GetAddress().GetSocketAddress()
		if web.GetType() != clusterv3.Cluster_STRICT_DNS || web.EdsClusterConfig != nil || len(lbs) != 1 ||
			sa.Address != "www.web.example" || sa.GetPortValue() != port {
			t.Errorf("DNS entry's cluster %s: %v", name, &web)
		}
		if assignment(name) != nil {
			t.Errorf("a DNS entry's cluster %s has an EDS resource", name)
		}
	}
}

// TestGRPCXDSServiceEntry: grpc-go's own xDS client reaches a service
// that only a ServiceEntry names: resolution DNS_ROUND_ROBIN (a
// LOGICAL_DNS cluster, which grpc-go resolves itself) on localhost, and
// STATIC (EDS).
func TestGRPCXDSServiceEntry(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	b := startBackend(t, "external-1")
	reg := registryWith(t, fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-dns}
spec:
  hosts: [localhost]
  ports: [{number: %d, name: grpc, protocol: GRPC}]
  resolution: DNS_ROUND_ROBIN
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-static}
spec:
  hosts: [ext-static]
  ports: [{number: 80, name: grpc, protocol: GRPC, targetPort: %d}]
  resolution: STATIC
  endpoints: [{address: 127.0.0.1}]
`, b.addr.Port, b.addr.Port))
	cp := startControlPlane(t, context.Background(), reg, nil)
	for _, target := range []string{fmt.Sprintf("xds:///localhost:%d", b.addr.Port), "xds:///ext-static"} {
		c := testgrpc.NewTestServiceClient(dialTarget(t, cp, "entry-client", target))
		if h, err := call(context.Background(), c, ""); err != nil || h != "external-1" {
			t.Fatalf("%s: got %q, %v", target, h, err)
		}
	}
}
