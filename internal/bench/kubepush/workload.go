package kubepush

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The workload, as the Sextant-only bench's (internal/bench/push): per
// service a DestinationRule with blue, green, gray and stable subsets (pod
// label color) and a VirtualService matching three of them by header plus a
// stable default; endpoints spread over the services and subsets, each a
// Pod (its labels) and an address in its Service's one EndpointSlice.

// Namespace is where the workload lives.
const Namespace = "bench"

var colors = []string{"blue", "green", "gray", "stable"}

var (
	vsGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}
	drGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}
)

var (
	createOpts = metav1.CreateOptions{}
	getOpts    = metav1.GetOptions{}
	listOne    = metav1.ListOptions{Limit: 1}
)

func serviceName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// endpoint j: service j mod services, color cycling with j / services, an
// address in 10.128.0.0/9 (apart from the API server's service range).
func endpointService(j, services int) int { return j % services }
func endpointColor(j, services int) string {
	return colors[(j/services)%len(colors)]
}
func endpointAddr(j int) string {
	return fmt.Sprintf("10.%d.%d.%d", 128+(j>>16&127), j>>8&255, j&255)
}
func podName(j, services int) string {
	return fmt.Sprintf("%s-%06d", serviceName(endpointService(j, services)), j)
}

func destinationRule(i, outlier int) *unstructured.Unstructured {
	var subsets []any
	for _, c := range colors {
		subsets = append(subsets, map[string]any{"name": c, "labels": map[string]any{"color": c}})
	}
	spec := map[string]any{"host": serviceName(i), "subsets": subsets}
	if outlier > 0 {
		spec["trafficPolicy"] = map[string]any{"outlierDetection": map[string]any{"consecutive5xxErrors": int64(outlier)}}
	}
	return istioObject("DestinationRule", serviceName(i), spec)
}

// vsMarker is generation gen's header value for color: "blue-g12z", of
// which no other generation's is a substring.
func vsMarker(color string, gen int) string {
	if gen == 0 {
		return color
	}
	return fmt.Sprintf("%s-g%dz", color, gen)
}

func virtualService(i, gen int) *unstructured.Unstructured {
	var http []any
	for _, c := range colors[:3] {
		http = append(http, map[string]any{
			"match": []any{map[string]any{"headers": map[string]any{"x-group": map[string]any{"exact": vsMarker(c, gen)}}}},
			"route": []any{map[string]any{"destination": map[string]any{"host": serviceName(i), "subset": c}}},
		})
	}
	http = append(http, map[string]any{
		"route": []any{map[string]any{"destination": map[string]any{"host": serviceName(i), "subset": "stable"}}},
	})
	return istioObject("VirtualService", serviceName(i), map[string]any{"hosts": []any{serviceName(i)}, "http": http})
}

func istioObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": Namespace},
		"spec":     spec,
	}}
}

// workload is the bench's writer of the scenario into the API server: it
// owns each Service's EndpointSlice (one per service, written whole) and
// which endpoints are up.
type workload struct {
	a         *apiServer
	services  int
	endpoints int

	// Per service: the slice as last written; mu serializes its writes.
	slices []*serviceSlice

	mu       sync.Mutex // guards the churn's state below
	rng      *rand.Rand
	busy     map[int]bool // endpoints with a change out
	downList []int        // endpoints down, oldest first
	gen      int          // config generations
}

type serviceSlice struct {
	mu    sync.Mutex
	slice *discoveryv1.EndpointSlice
	up    map[int]bool // endpoint index -> up
}

// load writes the scenario: namespaces, Services, Pods, EndpointSlices,
// DestinationRules and VirtualServices; progress gets one call per object.
func (a *apiServer) load(ctx context.Context, services, endpoints int, progress func()) (*workload, error) {
	w := &workload{a: a, services: services, endpoints: endpoints, rng: rand.New(rand.NewPCG(1, 2)), busy: map[int]bool{}}
	for _, ns := range []string{"istio-system", Namespace} {
		if _, err := a.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, createOpts); err != nil {
			return nil, fmt.Errorf("kubepush: namespace %s: %w", ns, err)
		}
		// No controllers run: the Pods' service account is written here.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
		if _, err := a.cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, createOpts); err != nil {
			return nil, fmt.Errorf("kubepush: service account %s/default: %w", ns, err)
		}
	}
	if err := parallel(ctx, services, func(i int) error {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: serviceName(i), Namespace: Namespace, Labels: map[string]string{"app": serviceName(i)}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": serviceName(i)},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
			},
		}
		if _, err := a.cs.CoreV1().Services(Namespace).Create(ctx, svc, createOpts); err != nil {
			return fmt.Errorf("kubepush: service %s: %w", svc.Name, err)
		}
		progress()
		for _, u := range []*unstructured.Unstructured{destinationRule(i, 0), virtualService(i, 0)} {
			gvr := drGVR
			if u.GetKind() == "VirtualService" {
				gvr = vsGVR
			}
			if _, err := a.dyn.Resource(gvr).Namespace(Namespace).Create(ctx, u, createOpts); err != nil {
				return fmt.Errorf("kubepush: %s %s: %w", u.GetKind(), u.GetName(), err)
			}
			progress()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// Pods before the slices that name them: istiod sets an endpoint whose
	// Pod it has not seen aside.
	if err := parallel(ctx, endpoints, func(j int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName(j, services), Namespace: Namespace, Labels: map[string]string{
				"app": serviceName(endpointService(j, services)), "color": endpointColor(j, services)}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "bench"}}},
		}
		if _, err := a.cs.CoreV1().Pods(Namespace).Create(ctx, pod, createOpts); err != nil {
			return fmt.Errorf("kubepush: pod %s: %w", pod.Name, err)
		}
		progress()
		return nil
	}); err != nil {
		return nil, err
	}
	w.slices = make([]*serviceSlice, services)
	for i := range w.slices {
		w.slices[i] = &serviceSlice{up: map[int]bool{}}
	}
	for j := range endpoints {
		w.slices[endpointService(j, services)].up[j] = true
	}
	if err := parallel(ctx, services, func(i int) error {
		s := w.slices[i]
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: serviceName(i) + "-1", Namespace: Namespace, Labels: map[string]string{
				discoveryv1.LabelServiceName: serviceName(i), discoveryv1.LabelManagedBy: "bench.sextant.io"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}},
			Endpoints:   w.sliceEndpoints(i),
		}
		out, err := a.cs.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, sl, createOpts)
		if err != nil {
			return fmt.Errorf("kubepush: endpointslice %s: %w", sl.Name, err)
		}
		s.slice = out
		progress()
		return nil
	}); err != nil {
		return nil, err
	}
	return w, nil
}

// sliceEndpoints are service i's endpoints up (its serviceSlice's up).
func (w *workload) sliceEndpoints(i int) []discoveryv1.Endpoint {
	var eps []discoveryv1.Endpoint
	for j := i; j < w.endpoints; j += w.services {
		if !w.slices[i].up[j] {
			continue
		}
		eps = append(eps, discoveryv1.Endpoint{
			Addresses:  []string{endpointAddr(j)},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: Namespace, Name: podName(j, w.services)},
		})
	}
	return eps
}

// nextEndpoint picks the next endpoint change: the longest down comes back
// when 50 (or 1%) are down and its down has reached every subscriber, else
// a random endpoint up goes down, never the last one up of its subset (an
// empty subset has no cluster in Sextant: its arrival could not be seen).
// ok is false when no endpoint is free.
func (w *workload) nextEndpoint() (j int, up, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.downList) >= min(50, max(1, w.endpoints/100)) && !w.busy[w.downList[0]] {
		j, w.downList = w.downList[0], w.downList[1:]
		w.busy[j] = true
		return j, true, true
	}
	for range 100 {
		j = w.rng.IntN(w.endpoints)
		if w.busy[j] || w.down(j) {
			continue
		}
		if w.upInSubset(j) < 2 {
			continue
		}
		w.busy[j] = true
		w.downList = append(w.downList, j)
		return j, false, true
	}
	return 0, false, false
}

// down reports whether endpoint j is down; with w.mu held.
func (w *workload) down(j int) bool {
	for _, d := range w.downList {
		if d == j {
			return true
		}
	}
	return false
}

// upInSubset counts the endpoints up (and not changing) of j's service and
// color; with w.mu held.
func (w *workload) upInSubset(j int) int {
	n := 0
	for k := endpointService(j, w.services); k < w.endpoints; k += w.services {
		if endpointColor(k, w.services) == endpointColor(j, w.services) && !w.down(k) && !w.busy[k] {
			n++
		}
	}
	return n + 1 // j itself, busy or not
}

// downCount is the number of endpoints down.
func (w *workload) downCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.downList)
}

// settle marks endpoint j's change as arrived everywhere (or given up on).
func (w *workload) settle(j int) {
	w.mu.Lock()
	delete(w.busy, j)
	w.mu.Unlock()
}

// setEndpoint writes service j's slice with endpoint j up or down.
func (w *workload) setEndpoint(ctx context.Context, j int, up bool) error {
	i := endpointService(j, w.services)
	s := w.slices[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up[j] = up
	sl := s.slice.DeepCopy()
	sl.Endpoints = w.sliceEndpoints(i)
	out, err := w.a.cs.DiscoveryV1().EndpointSlices(Namespace).Update(ctx, sl, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("kubepush: update endpointslice %s: %w", sl.Name, err)
	}
	s.slice = out
	return nil
}

// nextConfig is the next config change: a VirtualService or a
// DestinationRule of a random service, in turn, with its generation.
func (w *workload) nextConfig() (kind, svc, gen int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	kind = kindVirtualService
	if w.gen%2 == 1 {
		kind = kindDestinationRule
	}
	return kind, w.rng.IntN(w.services), w.gen
}

// writeConfig writes generation gen of service i's VirtualService or
// DestinationRule, as a merge patch of its spec.
func (w *workload) writeConfig(ctx context.Context, kind, i, gen int) error {
	u, gvr := virtualService(i, gen), vsGVR
	if kind == kindDestinationRule {
		u, gvr = destinationRule(i, gen), drGVR
	}
	b, err := json.Marshal(map[string]any{"spec": u.Object["spec"]})
	if err != nil {
		return err
	}
	if _, err := w.a.dyn.Resource(gvr).Namespace(Namespace).Patch(ctx, u.GetName(), types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("kubepush: patch %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// parallel runs f(0..n-1), 32 at a time, and returns the first error.
func parallel(ctx context.Context, n int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	next := make(chan int)
	for range min(32, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}
