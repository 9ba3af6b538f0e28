package xds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
)

// startADS serves c on loopback and returns a connection to it.
func startADS(t *testing.T, c *Cache) (*Server, *grpc.ClientConn) {
	t.Helper()
	return startADSWith(t, c, ServerOptions{})
}

func startADSWith(t *testing.T, c *Cache, opts ServerOptions) (*Server, *grpc.ClientConn) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	srv := NewServer(c, opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, lis); close(done) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); <-done })
	return srv, conn
}

func cluster(name string, p config.Policy) Resource {
	return Resource{Name: name, Version: "1", Message: Cluster(name, p)}
}

func endpoints(name string, ports ...uint32) Resource {
	var eps []Endpoint
	for _, p := range ports {
		eps = append(eps, Endpoint{ID: name + string(rune('a'+p%26)), Host: "10.0.0.1", Port: p, Weight: 1, Healthy: true})
	}
	return Resource{Name: name, Version: "1", Message: LoadAssignment(name, eps)}
}

func names(t *testing.T, r *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.Resources {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m.(interface{ GetName() string }).GetName())
	}
	slices.Sort(out)
	return out
}

func claNames(t *testing.T, r *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.Resources {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m.(interface{ GetClusterName() string }).GetClusterName())
	}
	slices.Sort(out)
	return out
}

func recv(t *testing.T, s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient) *discoveryv3.DiscoveryResponse {
	t.Helper()
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSotW(t *testing.T) {
	c := NewCache()
	c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{}), cluster("b", config.Policy{})}, nil, "1", time.Now())
	c.Apply(TypeEndpoint, []Resource{endpoints("a", 80), endpoints("b", 81)}, nil, "1", time.Now())
	srv, conn := startADS(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "n1"}
	// First CDS request without names: wildcard, the whole state.
	s.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: TypeCluster.URL()})
	r := recv(t, s)
	if got := names(t, r); !slices.Equal(got, []string{"a", "b"}) || r.VersionInfo != "1" {
		t.Fatalf("CDS %v version %q", got, r.VersionInfo)
	}
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeCluster.URL(), VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	// EDS by name: only what is named.
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"a"}})
	r = recv(t, s)
	if got := claNames(t, r); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("EDS %v", got)
	}
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"a"}, ResponseNonce: r.Nonce})
	// A change to b's endpoints is not sent; to a's it is, alone.
	c.Apply(TypeEndpoint, []Resource{endpoints("b", 82)}, nil, "2", time.Now())
	c.Apply(TypeEndpoint, []Resource{{Name: "a", Version: "3", Message: endpoints("a", 83).Message}}, nil, "3", time.Now())
	r = recv(t, s)
	if got := claNames(t, r); !slices.Equal(got, []string{"a"}) || revOf(r.VersionInfo) != "3" {
		t.Fatalf("EDS update %v version %q", got, r.VersionInfo)
	}
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"a"}, ResponseNonce: r.Nonce})
	// Re-publishing the same bytes sends nothing; a changed cluster sends
	// the whole state of the world, then its endpoints again (#245).
	if n, _ := c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{})}, nil, "4", time.Now()); n != 0 {
		t.Fatalf("unchanged cluster counted as %d changes", n)
	}
	c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{LoadBalancer: config.PolicyLeastRequest})}, []string{"b"}, "5", time.Now())
	r = recv(t, s)
	if got := names(t, r); r.TypeUrl != TypeCluster.URL() || !slices.Equal(got, []string{"a"}) || r.VersionInfo != "5" {
		t.Fatalf("CDS after change: %s %v %q", r.TypeUrl, got, r.VersionInfo)
	}
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeCluster.URL(), ResponseNonce: r.Nonce})
	r = recv(t, s)
	if got := claNames(t, r); r.TypeUrl != TypeEndpoint.URL() || !slices.Equal(got, []string{"a"}) {
		t.Fatalf("endpoints after the cluster changed: %s %v", r.TypeUrl, got)
	}
	// A NACK is kept with the node and the error; nothing is resent.
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeEndpoint.URL(), ResourceNames: []string{"a"}, ResponseNonce: r.Nonce,
		ErrorDetail: &status.Status{Message: "bad endpoints"}})
	waitStatus(t, srv, func(st SubscriberStatus) bool {
		for _, ts := range st.Types {
			if ts.Type == "endpoints" && len(ts.NACKs) == 1 && ts.NACKs[0].Message == "bad endpoints" && revOf(ts.NACKs[0].Version) == "3" {
				return st.NodeID == "n1" && st.Protocol == "sotw"
			}
		}
		return false
	})
}

func waitStatus(t *testing.T, srv *Server, ok func(SubscriberStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := srv.Status()
		if len(st) == 1 && ok(st[0]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never matched: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDelta(t *testing.T) {
	c := NewCache()
	c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{}), cluster("b", config.Policy{})}, nil, "1", time.Now())
	_, conn := startADS(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recvD := func() *discoveryv3.DeltaDiscoveryResponse {
		t.Helper()
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
		return r
	}
	resNames := func(r *discoveryv3.DeltaDiscoveryResponse) []string {
		var out []string
		for _, x := range r.Resources {
			out = append(out, x.Name+"@"+revOf(x.Version))
		}
		slices.Sort(out)
		return out
	}
	// Wildcard, with the client already holding a at version 1.
	_, va, _ := c.Get(TypeCluster, "a")
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "d1"}, TypeUrl: TypeCluster.URL(),
		InitialResourceVersions: map[string]string{"a": va}})
	r := recvD()
	if got := resNames(r); !slices.Equal(got, []string{"b@1"}) {
		t.Fatalf("first delta %v", got)
	}
	c.Apply(TypeCluster, []Resource{{Name: "a", Version: "2", Message: Cluster("a", config.Policy{LoadBalancer: config.PolicyRandom})}}, []string{"b"}, "2", time.Now())
	r = recvD()
	if got := resNames(r); !slices.Equal(got, []string{"a@2"}) || !slices.Equal(r.RemovedResources, []string{"b"}) {
		t.Fatalf("update %v removed %v", got, r.RemovedResources)
	}
	// A named resource that does not exist is reported absent at once.
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: TypeEndpoint.URL(), ResourceNamesSubscribe: []string{"zz"}})
	r = recvD()
	if r.TypeUrl != TypeEndpoint.URL() || len(r.Resources) != 0 || !slices.Equal(r.RemovedResources, []string{"zz"}) {
		t.Fatalf("absent resource: %v", r)
	}
	c.Apply(TypeEndpoint, []Resource{endpoints("zz", 90)}, nil, "3", time.Now())
	if r = recvD(); len(r.Resources) != 1 || r.Resources[0].Name != "zz" {
		t.Fatalf("created resource: %v", r)
	}
}

// TestUnansweredResponseCoalesces: changes made while a response is not yet
// ACKed go out together when the ACK comes (TestAckGate checks that they
// wait, with the send goroutine's clock in hand).
func TestUnansweredResponseCoalesces(t *testing.T) {
	c := NewCache()
	c.Apply(TypeEndpoint, []Resource{endpoints("a", 80), endpoints("b", 81)}, nil, "1", time.Now())
	// The test, not a timer, decides when the ACK comes.
	srv, conn := startADSWith(t, c, ServerOptions{AckWait: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recvD := func() *discoveryv3.DeltaDiscoveryResponse {
		t.Helper()
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "c1"}, TypeUrl: TypeEndpoint.URL(), ResourceNamesSubscribe: []string{"a", "b"}})
	r := recvD()
	if len(r.Resources) != 2 {
		t.Fatalf("first response has %d resources", len(r.Resources))
	}
	// Two changes, published apart, while the first response is unanswered:
	// the first stays pending (sent at once, it would not).
	c.Apply(TypeEndpoint, []Resource{{Name: "a", Version: "2", Message: endpoints("a", 82).Message}}, nil, "2", time.Now())
	waitStatus(t, srv, func(st SubscriberStatus) bool {
		return len(st.Types) == 1 && st.Types[0].Pending == 1 && st.Types[0].Responses == 1
	})
	c.Apply(TypeEndpoint, []Resource{{Name: "b", Version: "3", Message: endpoints("b", 83).Message}}, nil, "3", time.Now())
	s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: TypeEndpoint.URL(), ResponseNonce: r.Nonce})
	r = recvD()
	var got []string
	for _, x := range r.Resources {
		got = append(got, x.Name+"@"+revOf(x.Version))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a@2", "b@3"}) {
		t.Fatalf("after the ACK: %v, want both changes in one response", got)
	}
}

// TestAckGate: a type's next response waits for the answer to the previous
// one, an ACK or a NACK, or for AckWait to pass.
func TestAckGate(t *testing.T) {
	c := NewCache()
	c.Apply(TypeEndpoint, []Resource{endpoints("a", 80), endpoints("b", 81)}, nil, "1", time.Now())
	srv := NewServer(c, ServerOptions{AckWait: time.Second})
	for _, delta := range []bool{false, true} {
		sub := &subscriber{c: c, delta: delta, wake: make(chan struct{}, 1), ackWait: srv.ackWait}
		c.addSubscriber(sub)
		req := request{typeURL: TypeEndpoint.URL(), names: []string{"a", "b"}, subscribe: []string{"a", "b"}}
		srv.onRequest(sub, req)
		now := time.Now()
		build := func(at time.Time) (response, bool) {
			sub.mu.Lock()
			defer sub.mu.Unlock()
			return sub.build(TypeEndpoint, at)
		}
		r, ok := build(now)
		if !ok || r.count != 2 {
			t.Fatalf("delta %v: first response %v %d", delta, ok, r.count)
		}
		c.Apply(TypeEndpoint, []Resource{{Name: "a", Version: "2", Message: endpoints("a", 82).Message}}, nil, "2", now)
		if _, ok := build(now.Add(10 * time.Millisecond)); ok {
			t.Fatalf("delta %v: a response went before the previous one was answered", delta)
		}
		c.Apply(TypeEndpoint, []Resource{{Name: "b", Version: "3", Message: endpoints("b", 83).Message}}, nil, "3", now)
		if _, ok := sub.retryAt(now.Add(10 * time.Millisecond)); !ok {
			t.Fatalf("delta %v: work waits for an answer but no retry is due", delta)
		}
		req.nonce, req.names, req.subscribe = r.nonce, []string{"a", "b"}, nil
		srv.onRequest(sub, req) // the ACK
		if r, ok = build(now.Add(20 * time.Millisecond)); !ok || r.count != 2 {
			t.Fatalf("delta %v: after the ACK %v with %d resources, want both changes", delta, ok, r.count)
		}
		// No answer: the next change goes once AckWait has passed.
		c.Apply(TypeEndpoint, []Resource{{Name: "a", Version: "4", Message: endpoints("a", 84).Message}}, nil, "4", now)
		if _, ok := build(now.Add(500 * time.Millisecond)); ok {
			t.Fatalf("delta %v: sent before AckWait", delta)
		}
		if at, ok := sub.retryAt(now.Add(500 * time.Millisecond)); !ok || !at.Equal(now.Add(20*time.Millisecond+time.Second)) {
			t.Fatalf("delta %v: retry at %v %v", delta, at, ok)
		}
		// A round that began after the wait ended was not held by it: no
		// timer (one would fire at once, round after round, while the type
		// waits for something else, such as a turn).
		if at, ok := sub.retryAt(now.Add(20*time.Millisecond + time.Second)); ok {
			t.Fatalf("delta %v: retry at %v for a wait that had ended when the round began", delta, at)
		}
		if r, ok = build(now.Add(2 * time.Second)); !ok || r.count != 1 {
			t.Fatalf("delta %v: after AckWait %v %d", delta, ok, r.count)
		}
		// A NACK answers too.
		c.Apply(TypeEndpoint, []Resource{{Name: "b", Version: "5", Message: endpoints("b", 85).Message}}, nil, "5", now)
		msg := "bad"
		req.nonce, req.errMsg = r.nonce, &msg
		srv.onRequest(sub, req)
		if _, ok = build(now.Add(2*time.Second + time.Millisecond)); !ok {
			t.Fatalf("delta %v: nothing sent after a NACK", delta)
		}
		c.removeSubscriber(sub)
	}
}

// TestSlowSubscriber: a subscriber that stops reading blocks neither the
// publisher nor other subscribers, and when it reads again it gets the
// latest version of each resource, coalesced.
func TestSlowSubscriber(t *testing.T) {
	c := NewCache()
	big := func(v int) []Resource {
		// 64 clusters of ~4 KB metadata each: 256 KB per full response,
		// more than gRPC's flow-control windows.
		var out []Resource
		for i := range 64 {
			cl := Cluster("c"+string(rune('A'+i)), config.Policy{})
			cl.AltStatName = strings.Repeat("x", 4000) + string(rune('0'+v%10))
			out = append(out, Resource{Name: cl.Name, Version: "v", Message: cl})
		}
		return out
	}
	c.Apply(TypeCluster, big(0), nil, "0", time.Now())
	_, conn := startADS(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	slow, _ := client.StreamAggregatedResources(ctx)
	fast, _ := client.StreamAggregatedResources(ctx)
	slow.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "slow"}, TypeUrl: TypeCluster.URL()})
	fast.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "fast"}, TypeUrl: TypeCluster.URL()})
	recv(t, fast)
	const changes = 100
	start := time.Now()
	for v := 1; v <= changes; v++ {
		c.Apply(TypeCluster, big(v), nil, "v"+string(rune('0'+v%10))+"-"+time.Now().String(), time.Now())
	}
	// Publishing never waits for the stuck subscriber: were it to, it would
	// never end. The bound is generous for a loaded machine (13.8 s seen at
	// load 31 under -race).
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("publishing %d changes took %v", changes, took)
	}
	// The fast subscriber reads up to the last version.
	want := c.Version(TypeCluster)
	for {
		r := recv(t, fast)
		fast.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeCluster.URL(), ResponseNonce: r.Nonce})
		if r.VersionInfo == want {
			break
		}
	}
	// The slow one now reads: far fewer responses than changes, the last
	// one the latest state.
	n := 0
	for {
		r := recv(t, slow)
		n++
		if r.VersionInfo == want {
			if len(r.Resources) != 64 {
				t.Fatalf("latest response has %d clusters", len(r.Resources))
			}
			var cl clusterv3.Cluster
			if err := proto.Unmarshal(r.Resources[0].Value, &cl); err != nil || !strings.HasSuffix(cl.AltStatName, string(rune('0'+changes%10))) {
				t.Fatalf("latest response is not the latest state: %v", err)
			}
			break
		}
	}
	t.Logf("slow subscriber caught up with %d responses for %d changes", n, changes)
	if n >= changes {
		t.Fatalf("slow subscriber got %d responses for %d changes: not coalesced", n, changes)
	}
}

func TestLoadAssignment(t *testing.T) {
	md := func(kv ...string) label.Labels {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return label.FromMap(m)
	}
	cla := LoadAssignment("c", []Endpoint{
		{ID: "b", Host: "10.0.0.2", Port: 80, Weight: 3, Healthy: true, Metadata: md("region", "r1", "zone", "z1")},
		{ID: "a", Host: "10.0.0.1", Port: 80, Weight: 1, Healthy: true, Metadata: md("topology.kubernetes.io/region", "r1", "topology.kubernetes.io/zone", "z1")},
		{ID: "c", Host: "10.0.0.3", Port: 80, Weight: 5, Healthy: false, Metadata: md("zone", "z2")},
		{ID: "d", Host: "10.0.0.2", Port: 80, Weight: 2, Healthy: true},       // duplicate address
		{ID: "e", Host: "orders.example", Port: 80, Weight: 2, Healthy: true}, // not an IP
		{ID: "f", Host: "10.0.0.6", Port: 80, Weight: 0, Healthy: true},       // weight 0
		{ID: "g", Host: "10.0.0.7", Port: 80, Weight: 1, Healthy: true, Isolated: true},
	})
	type loc struct {
		key    string
		weight uint32
		eps    []string
	}
	var got []loc
	for _, l := range cla.Endpoints {
		x := loc{key: l.Locality.Region + "/" + l.Locality.Zone, weight: l.LoadBalancingWeight.GetValue()}
		for _, e := range l.LbEndpoints {
			x.eps = append(x.eps, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()+":"+e.HealthStatus.String())
		}
		got = append(got, x)
	}
	want := []loc{
		{"/", 1, []string{"10.0.0.7:DRAINING"}},
		{"/z2", 5, []string{"10.0.0.3:UNHEALTHY"}},
		{"r1/z1", 4, []string{"10.0.0.1:HEALTHY", "10.0.0.2:HEALTHY"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i].key != want[i].key || got[i].weight != want[i].weight || !slices.Equal(got[i].eps, want[i].eps) {
			t.Fatalf("locality %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestServeReturnsListenerError: when the listener fails, Serve returns
// its error at once rather than waiting for ctx to end.
func TestServeReturnsListenerError(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- NewServer(NewCache(), ServerOptions{}).Serve(ctx, lis) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Serve on a closed listener answered nil")
		}
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatal("Serve on a closed listener did not return until ctx ended")
	}
}

// failingSender is a stream whose sends fail.
type failingSender struct{ err error }

func (f failingSender) SendMsg(any) error { return f.err }

// TestStreamEndsWhenSendFails: once the send goroutine fails, the handler
// returns its error though the client sends nothing more (the handler
// used to sit in Recv until the client's next request).
func TestStreamEndsWhenSendFails(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	c := NewCache()
	c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{})}, nil, "1", time.Now())
	srv := NewServer(c, ServerOptions{})
	errSend := errors.New("connection reset")
	first := make(chan struct{}, 1)
	first <- struct{}{}
	ended := make(chan struct{}) // gRPC ends the stream once the handler returned
	recv := func() (request, error) {
		select {
		case <-first:
			return request{typeURL: TypeCluster.URL(), node: &corev3.Node{Id: "n1"}}, nil
		case <-ended:
			return request{}, io.EOF
		}
	}
	done := make(chan error, 1)
	go func() { done <- srv.serve(context.Background(), failingSender{errSend}, false, recv) }()
	select {
	case err := <-done:
		close(ended)
		if !errors.Is(err, errSend) {
			t.Fatalf("handler returned %v, want the send error", err)
		}
	case <-time.After(10 * time.Second):
		close(ended)
		<-done
		t.Fatal("the handler waited in Recv after its send goroutine failed")
	}
	srv.mu.Lock()
	n := len(srv.subs)
	srv.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d subscribers left", n)
	}
}

// TestStreamEndedByContextIsNotOK: a stream whose deadline passes or that
// is cancelled ends with DeadlineExceeded or Canceled, never OK. gRPC sends
// the handler's nil as OK, and a client whose own timer had not fired yet
// read that as the server closing its stream (io.EOF), as a CI run of
// cmd/sextant's TestSDSSecretsNeedSecretRead did.
func TestStreamEndedByContextIsNotOK(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	c := NewCache()
	c.Apply(TypeCluster, []Resource{cluster("a", config.Policy{})}, nil, "1", time.Now())
	srv := NewServer(c, ServerOptions{})
	for _, tc := range []struct {
		name  string
		first bool // the first request arrives before the end
		end   func(context.Context) (context.Context, context.CancelFunc)
		want  codes.Code
	}{
		{"deadline", true, func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 50*time.Millisecond)
		}, codes.DeadlineExceeded},
		{"deadline before the first request", false, func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 50*time.Millisecond)
		}, codes.DeadlineExceeded},
		{"cancelled", true, func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, codes.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.end(context.Background())
			defer cancel()
			first := make(chan struct{}, 1)
			if tc.first {
				first <- struct{}{}
			}
			// As gRPC's Recv: it fails once the stream's context has ended.
			recv := func() (request, error) {
				select {
				case <-first:
					return request{typeURL: TypeCluster.URL(), node: &corev3.Node{Id: "n1"}}, nil
				case <-ctx.Done():
					return request{}, grpcstatus.FromContextError(ctx.Err()).Err()
				}
			}
			done := make(chan error, 1)
			go func() { done <- srv.serve(ctx, discardSender{}, false, recv) }()
			select {
			case err := <-done:
				if grpcstatus.Code(err) != tc.want {
					t.Fatalf("handler returned %v (code %v), want %v", err, grpcstatus.Code(err), tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the handler did not return after its stream's context ended")
			}
		})
	}
}

// discardSender is a stream whose sends succeed and go nowhere.
type discardSender struct{}

func (discardSender) SendMsg(any) error { return nil }

// TestResponsePartsOutliveNextBuild: the send goroutine reuses one parts
// list and one header buffer per subscriber, but gRPC still holds a large
// response's parts (header included) until it has written them, after
// SendMsg returns: building the next response must not change them. A
// small response is copied by codec.Marshal, so its header may be reused.
func TestResponsePartsOutliveNextBuild(t *testing.T) {
	c := NewCache()
	var big []Resource
	for i := range 200 { // ~30 KB of clusters: above flatMax
		big = append(big, cluster(fmt.Sprintf("c%03d", i), config.Policy{}))
	}
	c.Apply(TypeCluster, big, nil, "1", time.Now())
	c.Apply(TypeEndpoint, []Resource{endpoints("c000", 80)}, nil, "2", time.Now())
	srv := NewServer(c, ServerOptions{})
	sub := &subscriber{c: c, wake: make(chan struct{}, 1), ackWait: srv.ackWait}
	c.addSubscriber(sub)
	defer c.removeSubscriber(sub)
	srv.onRequest(sub, request{typeURL: TypeCluster.URL()})
	srv.onRequest(sub, request{typeURL: TypeEndpoint.URL(), names: []string{"c000"}})
	build := func(typ Type) response {
		sub.mu.Lock()
		defer sub.mu.Unlock()
		r, ok := sub.build(typ, time.Now())
		if !ok {
			t.Fatalf("no %v response", typ)
		}
		return r
	}
	r := build(TypeCluster)
	if r.msg.size <= flatMax {
		t.Fatalf("cluster response %d bytes: the test needs one above %d", r.msg.size, flatMax)
	}
	out, err := codec{}.Marshal(r.msg) // what gRPC holds
	if err != nil {
		t.Fatal(err)
	}
	want := out.Materialize()
	if _, err := decodeDiscoveryResponse(want); err != nil {
		t.Fatal(err)
	}
	small := build(TypeEndpoint)
	if small.msg.size > flatMax {
		t.Fatalf("endpoint response %d bytes", small.msg.size)
	}
	if got := out.Materialize(); !bytes.Equal(got, want) {
		t.Fatal("building the next response changed the large response gRPC still holds")
	}
	var m discoveryv3.DiscoveryResponse
	if err := proto.Unmarshal(marshalled(t, small), &m); err != nil || m.TypeUrl != TypeEndpoint.URL() || len(m.Resources) != 1 || m.Nonce != small.nonce {
		t.Fatalf("small response: %v %v", &m, err)
	}
}

func marshalled(t *testing.T, r response) []byte {
	t.Helper()
	out, err := codec{}.Marshal(r.msg)
	if err != nil {
		t.Fatal(err)
	}
	return out.Materialize()
}

func decodeDiscoveryResponse(b []byte) (*discoveryv3.DiscoveryResponse, error) {
	var m discoveryv3.DiscoveryResponse
	return &m, proto.Unmarshal(b, &m)
}
