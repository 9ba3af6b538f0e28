package xdsclient_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.NewCallbackSerializer.func1"))
}

// handler accepts clusters unless their name starts with "bad".
type handler struct {
	mu   sync.Mutex
	seen []string
}

func (h *handler) Update(s xdsclient.State) (map[string][]string, error) {
	var names []string
	for n := range s[resource.ClusterType] {
		if strings.HasPrefix(n, "bad") {
			return nil, errors.New("cluster " + n + " is bad")
		}
		names = append(names, n)
	}
	h.mu.Lock()
	h.seen = names
	h.mu.Unlock()
	return nil, nil
}

// The NACK on the wire: go-control-plane's server sees the refused
// response's nonce, the previous version and the reason.
func TestNACKOnTheWire(t *testing.T) {
	snaps := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	var mu sync.Mutex
	var nacks []*discovery.DiscoveryRequest
	cb := server.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
		if r.GetErrorDetail() != nil {
			mu.Lock()
			nacks = append(nacks, r)
			mu.Unlock()
		}
		return nil
	}}
	srv := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, server.NewServer(context.Background(), snaps, cb))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	set := func(ver, name string) {
		s, _ := cache.NewSnapshot(ver, map[resource.Type][]types.Resource{resource.ClusterType: {&cluster.Cluster{Name: name}}})
		if err := snaps.SetSnapshot(context.Background(), "n1", s); err != nil {
			t.Fatal(err)
		}
	}
	set("1", "good")

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := &handler{}
	c, err := xdsclient.New(conn, xdsclient.Options{Node: &core.Node{Id: "n1"}, Handler: h,
		Types: []xdsclient.Type{{URL: resource.ClusterType, Wildcard: true, Decode: func(a *anypb.Any) (string, any, error) {
			var cl cluster.Cluster
			if err := a.UnmarshalTo(&cl); err != nil {
				return "", nil, err
			}
			return cl.GetName(), &cl, nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("version 1", func() bool { return c.Status().Versions[resource.ClusterType] == "1" })
	set("2", "bad-one")
	wait("the NACK", func() bool { mu.Lock(); defer mu.Unlock(); return len(nacks) > 0 })
	mu.Lock()
	n := nacks[0]
	mu.Unlock()
	if n.GetVersionInfo() != "1" || n.GetResponseNonce() == "" || !strings.Contains(n.GetErrorDetail().GetMessage(), "bad-one is bad") {
		t.Fatalf("NACK: version %q nonce %q detail %v", n.GetVersionInfo(), n.GetResponseNonce(), n.GetErrorDetail())
	}
	// The server answers each NACK with the same version again; the client
	// backs off instead of looping (a slow machine only lowers the count).
	time.Sleep(500 * time.Millisecond)
	if st := c.Status(); st.Versions[resource.ClusterType] != "1" || st.NACKs < 1 || st.NACKs > 5 {
		t.Fatalf("status after NACK: %+v (more than 5 NACKs in 0.5 s is a NACK loop)", st)
	}
	h.mu.Lock()
	seen := h.seen
	h.mu.Unlock()
	if len(seen) != 1 || seen[0] != "good" {
		t.Fatalf("handler state: %v", seen)
	}
	set("3", "fine")
	wait("version 3", func() bool { return c.Status().Versions[resource.ClusterType] == "3" })
}

// TestWildcardWithNames: a wildcard type with Names subscribes to "*" and
// those names on every request of the stream, ACKs included (a sidecar's
// inbound listener beside every listener). (go-control-plane's snapshot
// cache answers such a request with the named resources only; Sextant's
// server sends the wildcard's too: TestSidecarsPythonAndCurl.)
func TestWildcardWithNames(t *testing.T) {
	// Not ADS mode: it answers only names that list every resource it holds.
	snaps := cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	var mu sync.Mutex
	var reqs [][]string
	cb := server.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
		mu.Lock()
		reqs = append(reqs, r.GetResourceNames())
		mu.Unlock()
		return nil
	}}
	srv := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, server.NewServer(context.Background(), snaps, cb))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	s, _ := cache.NewSnapshot("1", map[resource.Type][]types.Resource{resource.ClusterType: {&cluster.Cluster{Name: "a"}, &cluster.Cluster{Name: "on-demand"}}})
	if err := snaps.SetSnapshot(context.Background(), "n1", s); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := &handler{}
	c, err := xdsclient.New(conn, xdsclient.Options{Node: &core.Node{Id: "n1"}, Handler: h,
		Types: []xdsclient.Type{{URL: resource.ClusterType, Wildcard: true, Names: []string{"on-demand"}, Decode: func(a *anypb.Any) (string, any, error) {
			var cl cluster.Cluster
			if err := a.UnmarshalTo(&cl); err != nil {
				return "", nil, err
			}
			return cl.GetName(), &cl, nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		n := len(h.seen)
		h.mu.Unlock()
		mu.Lock()
		acked := len(reqs) >= 2
		mu.Unlock()
		if n >= 1 && acked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handler saw %d clusters", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, names := range reqs {
		if len(names) != 2 || names[0] != "*" || names[1] != "on-demand" {
			t.Fatalf("request %d names %q, want [* on-demand]", i, names)
		}
	}
}
