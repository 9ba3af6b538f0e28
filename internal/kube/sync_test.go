package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// shared is one kube-apiserver for the package's tests (each test works in
// namespaces of its own): starting one takes seconds of the shared CPU.
var (
	sharedOnce sync.Once
	shared     *apiServer
	sharedStop func()
)

func apiServerFor(t *testing.T) *apiServer {
	t.Helper()
	sharedOnce.Do(func() {
		// A test of its own owns the process; it outlives this test via
		// the package's TestMain (stopAPIServer).
		shared, sharedStop = startAPIServerProcess(t)
	})
	if shared == nil {
		t.Fatal("the shared kube-apiserver did not start (see the first test's log)")
	}
	return shared
}

func openRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.Open(st, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); st.Close() })
	return r
}

// runSyncer runs a Syncer over cfg until the test ends and waits for its
// first sync.
func runSyncer(t *testing.T, cfg *rest.Config, reg Registry, opts Options) *Syncer {
	t.Helper()
	s, err := New(cfg, reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("syncer: %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := s.WaitSynced(wctx); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	return s
}

func createNamespace(t *testing.T, kc kubernetes.Interface, name string) {
	t.Helper()
	_, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No controller creates it; the ServiceAccount admission wants it for pods.
	_, err = kc.CoreV1().ServiceAccounts(name).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// endpoint is an EndpointSlice endpoint for address, optionally of a pod.
func endpoint(addr, pod string, ready, serving, terminating bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(serving), Terminating: ptr(terminating)},
	}
	if pod != "" {
		ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: pod}
		ep.NodeName = ptr("node-a")
	}
	return ep
}

func slice(ns, name, svc string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
}

// waitFor polls the registry until ok holds for service key, or fails.
func waitFor(t *testing.T, reg *registry.Registry, key naming.ServiceKey, what string, ok func(g *registry.Service) bool) *registry.Service {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		g := reg.Instances().Lookup(key)
		if g != nil && ok(g) {
			return g
		}
		if time.Now().After(deadline) {
			n := -1
			if g != nil {
				n = g.Len()
			}
			t.Fatalf("%s: not after a minute (service %s has %d instances)", what, key, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSyncEndpointSlices: EndpointSlices written by the test (no
// controllers run) become instances: pod labels (version drives a
// subset), locality from the node, ready/draining/critical from the
// conditions; a deleted slice's instances go; the instances are read-only
// through the registry's API writes; namespaces outside the allow list and
// in the deny list are not synced.
func TestSyncEndpointSlices(t *testing.T) {
	srv := apiServerFor(t)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	ctx := context.Background()
	for _, ns := range []string{"shop", "hidden", "denied"} {
		createNamespace(t, kc, ns)
	}
	if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Labels: map[string]string{ZoneLabel: "eu-1a", RegionLabel: "eu-1"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"v1", "v1", "v2", "v2"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("cart-%d", i),
			Labels: map[string]string{"app": "cart", "version": v}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "cart"}}}}
		if _, err := kc.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	es := slice("shop", "cart-abc", "cart",
		endpoint("10.1.0.1", "cart-0", true, true, false),
		endpoint("10.1.0.2", "cart-1", false, true, true), // draining
		endpoint("10.1.0.3", "cart-2", false, false, false),
		endpoint("10.1.0.4", "cart-3", true, true, false))
	if _, err := kc.DiscoveryV1().EndpointSlices("shop").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"hidden", "denied"} {
		if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice(ns, "x", "x", endpoint("10.9.0.1", "", true, true, false)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	reg := openRegistry(t)
	runSyncer(t, srv.cfg, reg, Options{Namespaces: []string{"shop", "denied"}, Exclude: []string{"denied"}})
	key := naming.ServiceKey{Namespace: "shop", Name: "cart"}
	g := waitFor(t, reg, key, "4 instances of shop/cart", func(g *registry.Service) bool { return g.Len() == 4 })
	byHost := map[string]*instance.Instance{}
	for _, in := range g.Items() {
		byHost[in.Host] = in
	}
	if in := byHost["10.1.0.1"]; !in.Healthy || in.Isolated || in.Port != 8080 || in.Protocol != "http" || in.Version != "v1" {
		t.Errorf("ready endpoint: %+v", in)
	}
	if in := byHost["10.1.0.2"]; !in.Isolated || !in.Healthy {
		t.Errorf("serving and terminating endpoint is not draining (isolated): %+v", in)
	}
	if in := byHost["10.1.0.3"]; in.Healthy {
		t.Errorf("not serving endpoint is healthy: %+v", in)
	}
	in := byHost["10.1.0.4"]
	for k, want := range map[string]string{ZoneLabel: "eu-1a", RegionLabel: "eu-1", "app": "cart", PodLabel: "cart-3", instance.OwnerLabel: Owner} {
		if got, _ := in.Metadata.Get(k); got != want {
			t.Errorf("metadata %s = %q, want %q", k, got, want)
		}
	}
	// A DestinationRule subset selects version=v2: the pods' label.
	sel, err := label.Parse("version=v2")
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, in := range g.Select(sel, false) {
		hosts = append(hosts, in.Host)
	}
	slices.Sort(hosts)
	if !slices.Equal(hosts, []string{"10.1.0.3", "10.1.0.4"}) {
		t.Errorf("subset version=v2 = %v", hosts)
	}
	snap := reg.Instances().Snapshot()
	if len(snap.Groups("hidden")) != 0 || len(snap.Groups("denied")) != 0 {
		t.Error("a namespace outside the allow list, or in the deny list, was synced")
	}

	// Read-only through Sextant's APIs.
	var owned *registry.OwnedError
	if _, _, err := reg.Deregister(ctx, []string{in.ID}); !errors.As(err, &owned) || owned.Owner != Owner {
		t.Errorf("deregister of a Kubernetes instance: %v", err)
	}

	// A relabelled pod moves its instance to the other subset.
	pod, err := kc.CoreV1().Pods("shop").Get(ctx, "cart-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels["version"] = "v3"
	if _, err := kc.CoreV1().Pods("shop").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reg, key, "relabelled pod's version", func(g *registry.Service) bool {
		in, ok := g.Get(byHost["10.1.0.4"].ID)
		return ok && in.Version == "v3"
	})

	if err := kc.DiscoveryV1().EndpointSlices("shop").Delete(ctx, "cart-abc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reg, key, "deleted slice's instances gone", func(g *registry.Service) bool { return g.Len() == 0 })
}

// TestRollingUpdate: 200 endpoints over two slices are replaced in waves
// of 20 (new ones added ready, old ones draining, then removed), as the
// EndpointSlice controller writes a rolling update: every version of the
// service the registry publishes has a ready instance.
func TestRollingUpdate(t *testing.T) {
	srv := apiServerFor(t)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	ctx := context.Background()
	createNamespace(t, kc, "roll")
	mk := func(gen, i int) discoveryv1.Endpoint {
		return endpoint(fmt.Sprintf("10.%d.%d.%d", 10+gen, i/250, i%250+1), "", true, true, false)
	}
	sl := []*discoveryv1.EndpointSlice{slice("roll", "web-a", "web"), slice("roll", "web-b", "web")}
	for i := range 200 {
		sl[i/100].Endpoints = append(sl[i/100].Endpoints, mk(0, i))
	}
	for i, s := range sl {
		c, err := kc.DiscoveryV1().EndpointSlices("roll").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl[i] = c
	}
	reg := openRegistry(t)
	runSyncer(t, srv.cfg, reg, Options{Namespaces: []string{"roll"}})
	key := naming.ServiceKey{Namespace: "roll", Name: "web"}
	waitFor(t, reg, key, "200 instances", func(g *registry.Service) bool { return g.ReadyLen() == 200 })

	// Follow every version of the service.
	wctx, stop := context.WithCancel(ctx)
	var versions, empty atomic.Int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var rev int64
		for {
			g := reg.Instances().Wait(wctx, key, rev)
			if wctx.Err() != nil || g == nil {
				return
			}
			versions.Add(1)
			if g.ReadyLen() == 0 {
				empty.Add(1)
			}
			rev = g.Revision
		}
	}()
	update := func(i int) {
		t.Helper()
		u, err := kc.DiscoveryV1().EndpointSlices("roll").Update(ctx, sl[i], metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl[i] = u
	}
	for wave := range 10 {
		s := wave / 5 // waves 0-4 replace web-a's endpoints, 5-9 web-b's
		lo := (wave % 5) * 20
		// The oldest 20 (new ones are appended) drain as 20 new come.
		for j := range 20 {
			old := &sl[s].Endpoints[j]
			old.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
		}
		for j := lo; j < lo+20; j++ {
			sl[s].Endpoints = append(sl[s].Endpoints, mk(1, s*100+j))
		}
		update(s)
		time.Sleep(50 * time.Millisecond)
		// The old ones go.
		var keep []discoveryv1.Endpoint
		for _, ep := range sl[s].Endpoints {
			if ep.Conditions.Terminating == nil || !*ep.Conditions.Terminating {
				keep = append(keep, ep)
			}
		}
		sl[s].Endpoints = keep
		update(s)
	}
	waitFor(t, reg, key, "200 new instances", func(g *registry.Service) bool {
		if g.Len() != 200 || g.ReadyLen() != 200 {
			return false
		}
		for _, in := range g.Items() {
			if !strings.HasPrefix(in.Host, "10.11.") {
				return false
			}
		}
		return true
	})
	stop()
	<-watched
	t.Logf("%d versions of the service seen during the update", versions.Load())
	if empty.Load() > 0 {
		t.Fatalf("%d versions of the service had no ready instance", empty.Load())
	}
}

// TestSyncLag: 200 pods' endpoints written one by one into two slices, as
// fast as the API server takes them: each appears in the registry; the
// lag from its write to the registry is reported (p50, p99), and its p99
// must stay within a generous bound on a loaded machine.
func TestSyncLag(t *testing.T) {
	srv := apiServerFor(t)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	ctx := context.Background()
	createNamespace(t, kc, "lag")
	sl := []*discoveryv1.EndpointSlice{slice("lag", "api-a", "api"), slice("lag", "api-b", "api")}
	for i, s := range sl {
		c, err := kc.DiscoveryV1().EndpointSlices("lag").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl[i] = c
	}
	reg := openRegistry(t)
	runSyncer(t, srv.cfg, reg, Options{Namespaces: []string{"lag"}})
	key := naming.ServiceKey{Namespace: "lag", Name: "api"}

	const n = 200
	ids := make([]string, n)
	written := make([]time.Time, n)
	seen := make([]time.Time, n)
	for i := range n {
		ids[i] = "k8s-" + instance.DefaultID("lag", "api", fmt.Sprintf("10.2.%d.%d", i/250, i%250+1), 8080)
	}
	var mu sync.Mutex
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var rev int64
		for {
			g := reg.Instances().Wait(wctx, key, rev)
			if wctx.Err() != nil || g == nil {
				return
			}
			now := time.Now()
			mu.Lock()
			for i, id := range ids {
				if seen[i].IsZero() {
					if _, ok := g.Get(id); ok {
						seen[i] = now
					}
				}
			}
			mu.Unlock()
			rev = g.Revision
		}
	}()
	for i := range n {
		s := i % 2
		sl[s].Endpoints = append(sl[s].Endpoints, endpoint(fmt.Sprintf("10.2.%d.%d", i/250, i%250+1), "", true, true, false))
		mu.Lock()
		written[i] = time.Now()
		mu.Unlock()
		u, err := kc.DiscoveryV1().EndpointSlices("lag").Update(ctx, sl[s], metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl[s] = u
	}
	waitFor(t, reg, key, "200 instances", func(g *registry.Service) bool { return g.Len() == n })
	stop()
	<-watched
	lags := make([]time.Duration, n)
	mu.Lock()
	for i := range n {
		lags[i] = seen[i].Sub(written[i])
	}
	mu.Unlock()
	slices.Sort(lags)
	p50, p99 := lags[n/2], lags[n*99/100]
	t.Logf("sync lag (EndpointSlice update -> registry), %d endpoints: p50 %v, p99 %v, max %v", n, p50, p99, lags[n-1])
	if p99 > 10*time.Second {
		t.Errorf("sync lag p99 %v", p99)
	}
}

// TestWatchResume: the connection to the API server breaks (refused) while
// four slices change (two updated, one created, one deleted); the watches
// resume from their resource version: the changes arrive and the registry
// writes are exactly one per changed slice (no resync storm: a relist, if
// client-go makes one, writes nothing that did not change). The break
// lasts 3 s, or SEXTANT_KUBE_BREAK (the 30 s:
// SEXTANT_KUBE_BREAK=30s go test -run TestWatchResume ./internal/kube).
func TestWatchResume(t *testing.T) {
	pause := 3 * time.Second
	if v := os.Getenv("SEXTANT_KUBE_BREAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SEXTANT_KUBE_BREAK=%q: %v", v, err)
		}
		pause = d
	}
	srv := apiServerFor(t)
	kc := kubernetes.NewForConfigOrDie(srv.cfg)
	ctx := context.Background()
	createNamespace(t, kc, "resume")
	var objs []*discoveryv1.EndpointSlice
	for i := range 5 {
		c, err := kc.DiscoveryV1().EndpointSlices("resume").Create(ctx, slice("resume", fmt.Sprintf("s%d", i), fmt.Sprintf("svc%d", i),
			endpoint(fmt.Sprintf("10.3.0.%d", i+1), "", true, true, false)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, c)
	}
	p := newCutProxy(t, srv.cfg.Host)
	cfg := rest.CopyConfig(srv.cfg)
	cfg.Host = "https://" + p.addr
	var lists atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			q := r.URL.Query()
			if strings.Contains(r.URL.Path, "endpointslices") && (q.Get("watch") == "" || q.Get("sendInitialEvents") == "true") {
				lists.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	reg := openRegistry(t)
	s := runSyncer(t, cfg, reg, Options{Namespaces: []string{"resume"}})
	waitFor(t, reg, naming.ServiceKey{Namespace: "resume", Name: "svc4"}, "svc4", func(g *registry.Service) bool { return g.Len() == 1 })
	listsBefore, writesBefore := lists.Load(), s.Writes()

	p.cut()
	for _, i := range []int{1, 2} {
		objs[i].Endpoints = append(objs[i].Endpoints, endpoint(fmt.Sprintf("10.3.1.%d", i), "", true, true, false))
		if _, err := kc.DiscoveryV1().EndpointSlices("resume").Update(ctx, objs[i], metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kc.DiscoveryV1().EndpointSlices("resume").Create(ctx, slice("resume", "s5", "svc5",
		endpoint("10.3.0.6", "", true, true, false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kc.DiscoveryV1().EndpointSlices("resume").Delete(ctx, "s3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	const changed = 4
	time.Sleep(pause)
	p.restore()
	resumed := time.Now()
	for _, w := range []struct {
		svc string
		n   int
	}{{"svc1", 2}, {"svc2", 2}, {"svc5", 1}, {"svc3", 0}} {
		waitFor(t, reg, naming.ServiceKey{Namespace: "resume", Name: w.svc}, "a change made during the break", func(g *registry.Service) bool { return g.Len() == w.n })
	}
	// Whatever else the resumed watches deliver (a relist included) must
	// write nothing more: give them a moment to.
	time.Sleep(time.Second)
	w := s.Writes() - writesBefore
	t.Logf("break of %v: caught up %v after the reconnect; %d EndpointSlice lists, %d registry writes for %d changed slices",
		pause, time.Since(resumed).Round(time.Millisecond)-time.Second, lists.Load()-listsBefore, w, changed)
	if w != changed {
		t.Errorf("%d registry writes after the break, want %d (one per changed slice)", w, changed)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// cutProxy forwards TCP to the API server; cut closes every connection and
// the listener (new connections are refused), restore listens again on
// the same port.
type cutProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	target = strings.TrimPrefix(target, "https://")
	p := &cutProxy{t: t, target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(up, c); up.Close(); c.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, up); up.Close(); c.Close() }()
		}
	}()
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *cutProxy) restore() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}
