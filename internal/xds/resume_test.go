package xds

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/sextant-mesh/sextant/internal/config"
)

// revOf is the publisher's part of a version (before the content hash).
func revOf(v string) string {
	r, _, _ := strings.Cut(v, "-")
	return r
}

// TestContentVersion: a version is the publisher's, then the hash of the
// bytes; the same bytes published at another version keep the suffix,
// other bytes change it.
func TestContentVersion(t *testing.T) {
	c := NewCache()
	c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{})}, nil, "1", time.Now())
	_, v1, _ := c.Get(TypeCluster, "a")
	other := NewCache()
	other.Apply(TypeCluster, []Resource{{Name: "a", Version: "17", Message: Cluster("a", config.Policy{})}}, nil, "17", time.Now())
	_, v17, _ := other.Get(TypeCluster, "a")
	if revOf(v1) != "1" || revOf(v17) != "17" || strings.TrimPrefix(v1, "1") != strings.TrimPrefix(v17, "17") {
		t.Fatalf("same bytes: versions %q and %q", v1, v17)
	}
	c.Apply(TypeCluster, []Resource{{Name: "a", Version: "1", Message: Cluster("a", config.Policy{LoadBalancer: config.PolicyRandom})}}, nil, "1", time.Now())
	if _, v, _ := c.Get(TypeCluster, "a"); v == v1 || revOf(v) != "1" {
		t.Fatalf("new bytes at the same version: %q, before %q", v, v1)
	}
	e := &entry{version: v17, hash: 42}
	for v, want := range map[string]bool{v17: true, "3-16": true, "3-17": false, "16": false, "3-": false, "3-zzzzzzzzzzzzzzzzz": false} {
		if got := e.sameContent(v); got != want {
			t.Errorf("sameContent(%q) = %v", v, got)
		}
	}
}

// TestDeltaResumeOnAnotherServer: a delta client that held resources from
// one server reconnects to another, whose resources have other versions
// (another revision) but partly the same bytes, with its
// initial_resource_versions: only what differs is sent (the changed
// resource, the new one) and what it holds that is gone is removed.
func TestDeltaResumeOnAnotherServer(t *testing.T) {
	first := NewCache()
	first.Apply(TypeCluster, []Resource{cluster("a", config.Policy{}), cluster("b", config.Policy{}), cluster("gone", config.Policy{})}, nil, "1", time.Now())
	first.Apply(TypeEndpoint, []Resource{endpoints("a", 80), endpoints("b", 81)}, nil, "1", time.Now())
	held := map[Type]map[string]string{}
	for _, typ := range []Type{TypeCluster, TypeEndpoint} {
		held[typ] = map[string]string{}
		for _, n := range first.Names(typ) {
			_, v, _ := first.Get(typ, n)
			held[typ][n] = v
		}
	}

	second := NewCache()
	at := func(r Resource) Resource { r.Version = "9"; return r }
	second.Apply(TypeCluster, []Resource{at(cluster("a", config.Policy{})), at(cluster("b", config.Policy{LoadBalancer: config.PolicyRandom})), at(cluster("new", config.Policy{}))}, nil, "9", time.Now())
	second.Apply(TypeEndpoint, []Resource{at(endpoints("a", 80)), at(endpoints("b", 81)), at(endpoints("new", 82))}, nil, "9", time.Now())
	_, conn := startADS(t, second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, typ := range []Type{TypeCluster, TypeEndpoint} {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ.URL(), InitialResourceVersions: held[typ]}
		if typ == TypeEndpoint {
			req.ResourceNamesSubscribe = []string{"*"}
		}
		if i == 0 {
			req.Node = &corev3.Node{Id: "resumed"}
		}
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	got := map[Type][]string{}
	removed := map[Type][]string{}
	// Clusters (b changed, new is new, gone is gone), then the endpoints of
	// the clusters sent (Envoy's warming) and the new ones.
	deadline := time.Now().Add(10 * time.Second)
	for len(got[TypeCluster])+len(removed[TypeCluster]) < 3 || !slices.Contains(got[TypeEndpoint], "new") {
		if time.Now().After(deadline) {
			t.Fatalf("got %v removed %v", got, removed)
		}
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		typ, _ := TypeOf(r.TypeUrl)
		for _, x := range r.Resources {
			got[typ] = append(got[typ], x.Name)
		}
		removed[typ] = append(removed[typ], r.RemovedResources...)
		s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
	}
	slices.Sort(got[TypeCluster])
	if !slices.Equal(got[TypeCluster], []string{"b", "new"}) || !slices.Equal(removed[TypeCluster], []string{"gone"}) {
		t.Fatalf("clusters sent %v, removed %v; want b and new sent, gone removed, a not resent", got[TypeCluster], removed[TypeCluster])
	}
	// a's endpoints are the same bytes: never resent. b's go again after
	// its changed cluster, as they would on the first server.
	if slices.Contains(got[TypeEndpoint], "a") {
		t.Fatalf("endpoints sent %v: a was held at the same bytes", got[TypeEndpoint])
	}
}

// FuzzSameContent: a client's version string (initial_resource_versions,
// outside input) never panics the comparison, and matches only the
// entry's own version or its hash.
func FuzzSameContent(f *testing.F) {
	for _, v := range []string{"", "-", "1", "1-", "17-b", "17-3k2x9f0w1q7pa", "a-b-c", "-zzzzzzzzzzzzz", "1-+1", "9-18446744073709551615"} {
		f.Add(v)
	}
	e := &entry{version: "5-b", hash: 11}
	f.Fuzz(func(t *testing.T, v string) {
		if !e.sameContent(v) || v == e.version {
			return
		}
		i := strings.LastIndexByte(v, '-')
		if i < 0 {
			t.Fatalf("%q matched without a hash", v)
		}
		if h, err := strconv.ParseUint(v[i+1:], 36, 64); err != nil || h != e.hash {
			t.Fatalf("%q matched hash %d", v, e.hash)
		}
	})
}

// TestMaxConnectionAge: the server closes a connection past its age, the
// client reconnects, and a delta client resumes with nothing resent.
func TestMaxConnectionAge(t *testing.T) {
	c := NewCache()
	c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{}), cluster("b", config.Policy{})}, nil, "1", time.Now())
	_, conn := startADSWith(t, c, ServerOptions{MaxConnectionAge: 300 * time.Millisecond, MaxConnectionAgeGrace: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	s, err := client.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "aged"}, TypeUrl: TypeCluster.URL()})
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, res := range r.Resources {
		held[res.Name] = res.Version
	}
	if len(held) != 2 {
		t.Fatalf("first response: %d clusters, want 2", len(held))
	}
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: TypeCluster.URL(), ResponseNonce: r.Nonce})
	start := time.Now()
	if _, err := s.Recv(); err == nil {
		t.Fatal("a response, want the stream closed by the connection's age")
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the stream ended after %v", took)
	}
	// The client's connection comes back and a new stream resumes: only
	// what changed meanwhile is sent. (A stream may itself age out before
	// its answer on a loaded machine: then again, a bounded number of
	// times.)
	c.Apply(TypeCluster, []Resource{cluster("c", config.Policy{})}, nil, "2", time.Now())
	for attempt := 1; ; attempt++ {
		again, err := client.DeltaAggregatedResources(ctx)
		if err == nil {
			err = again.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "aged"}, TypeUrl: TypeCluster.URL(), InitialResourceVersions: held})
		}
		if err == nil {
			if r, err = again.Recv(); err == nil {
				if len(r.Resources) != 1 || r.Resources[0].Name != "c" || len(r.RemovedResources) != 0 {
					t.Fatalf("after reconnecting: %d resources (%v), removed %v; want only the new c", len(r.Resources), r.Resources, r.RemovedResources)
				}
				return
			}
		}
		if attempt == 10 {
			t.Fatalf("no answer on a new stream after %d attempts: %v", attempt, err)
		}
	}
}
