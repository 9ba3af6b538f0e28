package xds

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// grants is a SecretAccess whose allowed namespaces the test changes, as
// a policy change changes the guard's (acl.SecretStream is the server's;
// cmd/sextant's TestSDSSecretsNeedSecretRead runs it end to end).
type grants struct {
	mu      sync.Mutex
	allowed map[string]bool
	changed chan struct{}
	sent    []string
}

func (g *grants) Allows(ns string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.allowed[ns]
}

func (g *grants) Sent(ns, name, version, node string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sent = append(g.sent, node+":"+name)
}

func (g *grants) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

func (g *grants) set(ns string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.allowed[ns] = ok
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *grants) sentList() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sent)
}

func tlsSecret(name string) Resource {
	return Resource{Name: name, Version: "1", Message: &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		PrivateKey: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte("key of " + name)}}}}}}
}

// TestSecretsFollowGrants: a delta stream gets only the secrets of the
// namespaces its access allows, gets a namespace's secrets when it is
// granted, is told they are removed when the grant goes, and every secret
// sent is reported once.
func TestSecretsFollowGrants(t *testing.T) {
	c := NewCache()
	c.Apply(TypeSecret, []Resource{tlsSecret("a/x"), tlsSecret("b/y"), tlsSecret("nonamespace")}, nil, "1", time.Now())
	g := &grants{allowed: map[string]bool{"a": true}, changed: make(chan struct{})}
	_, conn := startADSWith(t, c, ServerOptions{SecretAccess: func(context.Context) SecretAccess { return g }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recv := func() (res, removed []string) {
		t.Helper()
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
		for _, x := range r.Resources {
			res = append(res, x.Name)
		}
		slices.Sort(res)
		return res, r.RemovedResources
	}
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "gw"}, TypeUrl: TypeSecret.URL(),
		ResourceNamesSubscribe: []string{"*", "b/y", "nonamespace"}})
	if res, removed := recv(); !slices.Equal(res, []string{"a/x"}) || !slices.Equal(removed, []string{"b/y", "nonamespace"}) {
		t.Fatalf("first response: %v, removed %v; want a/x, and b/y and nonamespace absent", res, removed)
	}
	g.set("b", true)
	if res, removed := recv(); !slices.Equal(res, []string{"b/y"}) || len(removed) != 0 {
		t.Fatalf("after granting b: %v, removed %v; want b/y", res, removed)
	}
	g.set("a", false)
	if res, removed := recv(); len(res) != 0 || !slices.Equal(removed, []string{"a/x"}) {
		t.Fatalf("after revoking a: %v, removed %v; want a/x removed", res, removed)
	}
	if got := g.sentList(); !slices.Equal(got, []string{"gw:a/x", "gw:b/y"}) {
		t.Fatalf("reported sent: %v", got)
	}
}

// TestSecretsFollowGrantsSotW: a state-of-the-world stream gets a secret
// once it is granted, and a change of rights does not send again what it
// already has.
func TestSecretsFollowGrantsSotW(t *testing.T) {
	c := NewCache()
	c.Apply(TypeSecret, []Resource{tlsSecret("a/x"), tlsSecret("b/y")}, nil, "1", time.Now())
	g := &grants{allowed: map[string]bool{"a": true}, changed: make(chan struct{})}
	_, conn := startADSWith(t, c, ServerOptions{SecretAccess: func(context.Context) SecretAccess { return g }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(nonce string) {
		s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "gw"}, TypeUrl: TypeSecret.URL(), ResourceNames: []string{"a/x", "b/y"}, ResponseNonce: nonce})
	}
	ask("")
	r := recv(t, s)
	if got := names(t, r); !slices.Equal(got, []string{"a/x"}) {
		t.Fatalf("first response: %v, want a/x only", got)
	}
	ask(r.Nonce)
	g.set("c", true) // nothing of c is wanted: nothing to send
	g.set("b", true)
	r = recv(t, s)
	if got := names(t, r); !slices.Equal(got, []string{"b/y"}) {
		t.Fatalf("after granting c, then b: %v, want b/y alone (a/x is held already)", got)
	}
	if got := g.sentList(); !slices.Equal(got, []string{"gw:a/x", "gw:b/y"}) {
		t.Fatalf("reported sent: %v", got)
	}
}

// TestSecretsWithoutAccessGoToAll: without a SecretAccess (ACLs off) a
// state-of-the-world stream gets every secret it names, as before.
func TestSecretsWithoutAccessGoToAll(t *testing.T) {
	c := NewCache()
	c.Apply(TypeSecret, []Resource{tlsSecret("a/x"), tlsSecret("b/y")}, nil, "1", time.Now())
	_, conn := startADS(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "gw"}, TypeUrl: TypeSecret.URL(), ResourceNames: []string{"a/x", "b/y"}})
	if got := names(t, recv(t, s)); !slices.Equal(got, []string{"a/x", "b/y"}) {
		t.Fatalf("secrets: %v", got)
	}
}
