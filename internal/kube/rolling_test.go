package kube

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sextant-mesh/sextant/internal/gateway/gatewaytest"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// checkedRegistry looks at a service after each of the sync's writes: the
// sync is its one writer and writes from one goroutine, so what Lookup
// answers right after a Sync returns is that write's state: every state
// the sync made, where a watcher of the change feed may see two writes as
// one version.
type checkedRegistry struct {
	*registry.Registry
	key             naming.ServiceKey
	mu              sync.Mutex
	armed           bool
	writes, emptied int
}

func (c *checkedRegistry) Sync(ctx context.Context, owner string, put []*instance.Instance, del []string) (int64, error) {
	rev, err := c.Registry.Sync(ctx, owner, put, del)
	if err == nil {
		g := c.Registry.Instances().Lookup(c.key)
		c.mu.Lock()
		if c.armed {
			c.writes++
			if g == nil || g.ReadyLen() == 0 {
				c.emptied++
			}
		}
		c.mu.Unlock()
	}
	return rev, err
}

// arm starts the checks (the first sync fills the service from empty).
func (c *checkedRegistry) arm() {
	c.mu.Lock()
	c.armed = true
	c.mu.Unlock()
}

func (c *checkedRegistry) counts() (writes, emptied int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.emptied
}

// podBackends are HTTP servers on this machine's address, one listener
// per pod, each answering with its pod's name.
type podBackends struct {
	ip   string
	srv  *http.Server
	mu   sync.Mutex
	name map[int]string // port -> pod
}

func newPodBackends(t *testing.T, ip string) *podBackends {
	b := &podBackends{ip: ip, name: map[int]string{}}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, port, _ := net.SplitHostPort(r.Context().Value(http.LocalAddrContextKey).(net.Addr).String())
		p, _ := strconv.Atoi(port)
		b.mu.Lock()
		n := b.name[p]
		b.mu.Unlock()
		io.WriteString(w, n)
	})}
	t.Cleanup(func() { b.srv.Close() })
	return b
}

// listen starts pod's listener and returns its port.
func (b *podBackends) listen(t *testing.T, pod string) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(b.ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	b.mu.Lock()
	b.name[port] = pod
	b.mu.Unlock()
	go b.srv.Serve(ln)
	return int32(port)
}

// parallel runs f(0..n-1) on 20 goroutines (the API server's write is
// an etcd commit of ~200 ms; one at a time, 200 of them take 40 s). f is
// retried after a server-side timeout (parallelN), so it must accept
// finding its write already done.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	parallelN(t, 20, n, f)
}

// TestRollingUpdateThroughGateway is a Deployment's rolling update of 200
// pods in waves of 20, written as the EndpointSlice controller writes it,
// while a loader calls the service through Sextant's gateway (an xDS
// client of the real push engine): the new pods' endpoints come ready,
// then the old ones are serving+terminating (draining), then removed. The
// pods are host-network pods on this machine's one address, each on a
// port of its own (an EndpointSlice may not hold loopback addresses), so
// the controller writes one slice per pod (one slice per port set). No
// call fails, and no version of the service in the registry's change feed
// is without a ready instance.
func TestRollingUpdateThroughGateway(t *testing.T) {
	const pods, wave = 200, 20
	srv := apiServerFor(t)
	// No client-side throttling: the controller writes as fast as it may.
	wcfg := rest.CopyConfig(srv.cfg)
	wcfg.QPS, wcfg.Burst = 1000, 1000
	kc := kubernetes.NewForConfigOrDie(wcfg)
	ctx := context.Background()
	const ns = "rollgw"
	createNamespace(t, kc, ns)
	ip := hostIP(t)
	backends := newPodBackends(t, ip)

	type podRef struct {
		name  string
		port  int32
		slice *discoveryv1.EndpointSlice
	}
	mkPods := func(gen string, n int) []*podRef {
		out := make([]*podRef, n)
		for i := range out {
			name := fmt.Sprintf("web-%s-%03d", gen, i)
			out[i] = &podRef{name: name, port: backends.listen(t, name)}
		}
		parallel(t, n, func(i int) error {
			p := out[i]
			_, err := kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: map[string]string{"app": "web", "version": gen}},
				Spec:       corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "web", Image: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: p.port}}}}},
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil // a create retried after a timeout that had been done
			}
			return err
		})
		return out
	}
	sliceOf := func(p *podRef, ready, serving, terminating bool) *discoveryv1.EndpointSlice {
		ep := discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(serving), Terminating: ptr(terminating)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.name},
		}
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name + "-slice",
				Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{ep},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(p.port), Protocol: ptr(corev1.ProtocolTCP)}},
		}
	}
	create := func(ps []*podRef) {
		parallel(t, len(ps), func(i int) error {
			c, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, sliceOf(ps[i], true, true, false), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) { // retried after a timeout
				c, err = kc.DiscoveryV1().EndpointSlices(ns).Get(ctx, ps[i].name+"-slice", metav1.GetOptions{})
			}
			ps[i].slice = c
			return err
		})
	}
	old := mkPods("v1", pods)
	create(old)

	cs := startConfigStack(t)
	key := naming.ServiceKey{Namespace: ns, Name: "web"}
	checked := &checkedRegistry{Registry: cs.reg, key: key}
	runSyncer(t, srv.cfg, checked, Options{Namespaces: []string{ns}})
	waitFor(t, cs.reg, key, "200 ready instances", func(g *registry.Service) bool { return g.ReadyLen() == pods })
	checked.arm()
	gw := gatewaytest.Start(t, cs.ads, "kube-gateway")
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	call := func() (string, error) {
		req, _ := http.NewRequest("GET", gw+"/", nil)
		req.Host = "web." + ns
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		return string(b), nil
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := call(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the gateway never reached web.%s: %v", ns, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Follow the service's versions in the registry.
	wctx, stopWatch := context.WithCancel(ctx)
	var versions, empty atomic.Int64
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var rev int64
		for {
			g := cs.reg.Instances().Wait(wctx, key, rev)
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
	// The loader: 4 callers until the update ends.
	lctx, stopLoad := context.WithCancel(ctx)
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	var lwg sync.WaitGroup
	reached := map[string]int{}
	var rmu sync.Mutex
	for range 4 {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			for lctx.Err() == nil {
				pod, err := call()
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				rmu.Lock()
				reached[pod]++
				rmu.Unlock()
				// A steady load, not one that starves the API server.
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}

	start := time.Now()
	neu := mkPods("v2", pods)
	for w := range pods / wave {
		in, out := neu[w*wave:(w+1)*wave], old[w*wave:(w+1)*wave]
		create(in) // the new pods are ready
		parallel(t, wave, func(i int) error {
			s := sliceOf(out[i], false, true, true) // serving and terminating: draining
			s.ResourceVersion = out[i].slice.ResourceVersion
			_, err := kc.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) { // retried after a timeout: done if it is draining
				got, gerr := kc.DiscoveryV1().EndpointSlices(ns).Get(ctx, s.Name, metav1.GetOptions{})
				if gerr == nil && len(got.Endpoints) == 1 && got.Endpoints[0].Conditions.Terminating != nil && *got.Endpoints[0].Conditions.Terminating {
					return nil
				}
			}
			return err
		})
		parallel(t, wave, func(i int) error {
			err := kc.DiscoveryV1().EndpointSlices(ns).Delete(ctx, out[i].slice.Name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil // retried after a timeout that had deleted it
			}
			return err
		})
	}
	waitFor(t, cs.reg, key, "only the 200 new pods' instances", func(g *registry.Service) bool {
		if g.Len() != pods || g.ReadyLen() != pods {
			return false
		}
		for _, in := range g.Items() {
			if in.Version != "v2" {
				return false
			}
		}
		return true
	})
	took := time.Since(start)
	// Calls settle on the new pods once the push reaches the gateway.
	deadline = time.Now().Add(30 * time.Second)
	for {
		rmu.Lock()
		clear(reached)
		rmu.Unlock()
		time.Sleep(300 * time.Millisecond)
		rmu.Lock()
		var stale string
		for p := range reached {
			if p[:6] == "web-v1" {
				stale = p
			}
		}
		n := len(reached)
		rmu.Unlock()
		if stale == "" && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still reach old pod %s 30 s after the update", stale)
		}
	}
	stopLoad()
	lwg.Wait()
	stopWatch()
	<-watched
	writes, emptied := checked.counts()
	t.Logf("rolling update of %d pods in waves of %d: %v; %d calls through the gateway, %d failed; %d registry writes, %d versions of the service seen by a watcher",
		pods, wave, took.Round(time.Millisecond), calls.Load(), failed.Load(), writes, versions.Load())
	if emptied > 0 {
		t.Errorf("%d of the sync's %d registry writes left the service without a ready instance", emptied, writes)
	}
	if calls.Load() < 100 {
		t.Errorf("only %d calls during the update", calls.Load())
	}
	if failed.Load() > 0 {
		t.Errorf("%d of %d calls failed; first: %v", failed.Load(), calls.Load(), firstErr.Load())
	}
	if empty.Load() > 0 {
		t.Errorf("%d versions of the service had no ready instance", empty.Load())
	}
}
