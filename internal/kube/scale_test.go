package kube

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// cpuTime is the process's user+system CPU so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestSync10k gives the sync's figures at 10,000 endpoints (one service,
// 100 EndpointSlices of 100, as the controller packs them): the heap the
// sync holds per endpoint (its informer caches, its own state and the
// registry's instances; no pods, so no pod cache), the CPU of its first
// sync, then 200 EndpointSlice updates (one endpoint replaced each, 10 in
// flight) made once without the sync running and once with it: the
// difference in process CPU is the sync's, per event, and the lag from
// each write to the registry is reported. Slow (minutes of the API
// server's writes): only with SEXTANT_KUBE_SCALE=1.
func TestSync10k(t *testing.T) {
	if os.Getenv("SEXTANT_KUBE_SCALE") == "" {
		t.Skip("SEXTANT_KUBE_SCALE=1 runs the 10,000-endpoint figures")
	}
	const nslices, per, events = 100, 100, 200
	srv := apiServerFor(t)
	wcfg := rest.CopyConfig(srv.cfg)
	wcfg.QPS, wcfg.Burst = 1000, 1000
	kc := kubernetes.NewForConfigOrDie(wcfg)
	ctx := context.Background()
	const ns = "scale"
	createNamespace(t, kc, ns)
	addr := func(s, j, gen int) string { return fmt.Sprintf("10.%d.%d.%d", 100+gen, s, j+1) }
	sl := make([]*discoveryv1.EndpointSlice, nslices)
	var slMu sync.Mutex
	parallel(t, nslices, func(s int) error {
		es := slice(ns, fmt.Sprintf("big-%03d", s), "big")
		for j := range per {
			es.Endpoints = append(es.Endpoints, endpoint(addr(s, j, 0), "", true, true, false))
		}
		c, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // retried after a timeout
			c, err = kc.DiscoveryV1().EndpointSlices(ns).Get(ctx, es.Name, metav1.GetOptions{})
		}
		sl[s] = c
		return err
	})
	// update replaces endpoint j of event i's slice with a new address (of
	// generation gen), and returns when the API server answered.
	written := make([]time.Time, events)
	answered := make([]time.Time, events)
	ids := make([]string, events)
	seen := make([]time.Time, events)
	var mu sync.Mutex // ids and seen, shared with the registry watcher
	updates := func(gen int) {
		parallelN(t, 10, events, func(i int) error {
			s, j := i%nslices, i/nslices
			slMu.Lock()
			es := sl[s].DeepCopy()
			slMu.Unlock()
			a := addr(s, j, gen)
			es.Endpoints[j].Addresses = []string{a}
			mu.Lock()
			ids[i] = "k8s-" + instance.DefaultID(ns, "big", a, 8080)
			mu.Unlock()
			written[i] = time.Now()
			u, err := kc.DiscoveryV1().EndpointSlices(ns).Update(ctx, es, metav1.UpdateOptions{})
			answered[i] = time.Now()
			if err != nil {
				return err
			}
			slMu.Lock()
			sl[s] = u
			slMu.Unlock()
			return nil
		})
	}
	// The client's own CPU for the updates, with no sync running.
	cpu0 := cpuTime(t)
	updates(1)
	clientCPU := cpuTime(t) - cpu0

	reg := openRegistry(t)
	heap0 := heapAlloc()
	cpu0 = cpuTime(t)
	start := time.Now()
	s := runSyncer(t, srv.cfg, reg, Options{Namespaces: []string{ns}})
	key := naming.ServiceKey{Namespace: ns, Name: "big"}
	waitFor(t, reg, key, "10,000 instances", func(g *registry.Service) bool { return g.Len() == nslices*per })
	firstSync, firstCPU := time.Since(start), cpuTime(t)-cpu0
	heap1 := heapAlloc()
	runtime.KeepAlive(s)

	clear(ids) // the watcher looks only for generation 2's
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
				if seen[i].IsZero() && id != "" {
					if _, ok := g.Get(id); ok {
						seen[i] = now
					}
				}
			}
			mu.Unlock()
			rev = g.Revision
		}
	}()
	writes0 := s.Writes()
	cpu0 = cpuTime(t)
	updates(2)
	waitFor(t, reg, key, "every update", func(*registry.Service) bool {
		mu.Lock()
		defer mu.Unlock()
		return !slices.ContainsFunc(seen, time.Time.IsZero)
	})
	withSync := cpuTime(t) - cpu0
	stop()
	<-watched
	var fromWrite, fromAnswer []time.Duration
	mu.Lock()
	for i := range events {
		fromWrite = append(fromWrite, seen[i].Sub(written[i]))
		fromAnswer = append(fromAnswer, seen[i].Sub(answered[i]))
	}
	mu.Unlock()
	slices.Sort(fromWrite)
	slices.Sort(fromAnswer)
	p := func(d []time.Duration, q int) time.Duration { return d[len(d)*q/100].Round(100 * time.Microsecond) }
	n := nslices * per
	t.Logf("10,000 endpoints (%d slices of %d): first sync %v, %v CPU (%.1f us per endpoint); heap +%.1f MB, %d bytes per endpoint",
		nslices, per, firstSync.Round(time.Millisecond), firstCPU.Round(time.Millisecond), float64(firstCPU.Microseconds())/float64(n),
		float64(heap1-heap0)/1e6, (heap1-heap0)/uint64(n))
	t.Logf("%d EndpointSlice updates (10 in flight): sync lag from the write p50 %v p99 %v max %v; from the API server's answer p50 %v p99 %v",
		events, p(fromWrite, 50), p(fromWrite, 99), fromWrite[events-1].Round(100*time.Microsecond), p(fromAnswer, 50), p(fromAnswer, 99))
	t.Logf("CPU: %v for the updates with the sync, %v without (the client's); the sync's %v per EndpointSlice event (%d registry writes)",
		withSync.Round(time.Millisecond), clientCPU.Round(time.Millisecond), ((withSync - clientCPU) / events).Round(time.Microsecond), s.Writes()-writes0)
	// Two updates of one slice queued together are one write.
	if w := s.Writes() - writes0; w > events || w < events/2 {
		t.Errorf("%d registry writes for %d slice updates", w, events)
	}
}

// parallelN is parallel with k in flight.
func parallelN(t *testing.T, k, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	var errs []error
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				if err := retryTimeout(func() error { return f(i) }); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Fatal(err)
	}
}

// retryTimeout runs f and, while it fails with a server-side timeout,
// again, up to 3 times in all: on a loaded machine the test API server's
// etcd answers "request timed out" to writes it may still commit, and
// Kubernetes' own controllers retry them so.
func retryTimeout(f func() error) error {
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Second)
		}
		if err = f(); err == nil || !serverTimeout(err) {
			return err
		}
	}
	return err
}

// serverTimeout reports whether err is the API server's or etcd's timeout.
func serverTimeout(err error) bool {
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || strings.Contains(err.Error(), "etcdserver: request timed out")
}
