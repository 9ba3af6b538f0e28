package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// EndpointSlices the mirror writes (and the app.kubernetes.io/managed-by
// of its Services): the sync leaves them out, so that the two directions
// never feed each other.
const ManagedBy = "sextant.io"

const managedByService = "app.kubernetes.io/managed-by"

// MirrorRegistry is what the mirror reads: the registry's instances and
// the catalog whose changes it follows. Called from the mirror's goroutine;
// neither blocks but Subscription.Next.
type MirrorRegistry interface {
	Instances() *registry.Instances
	Catalog() *catalog.Catalog
}

// Mirror writes the registry's services that Kubernetes does not own (VMs,
// Consul API clients, the SDK) into the cluster as selector-less ClusterIP
// Services with EndpointSlices, kept in step with the registry and removed
// when their last instance goes. It never touches a Service it did not
// create, nor a service with instances from Kubernetes.
//
// Goroutines: Run is the one goroutine; it follows the catalog's instance
// changes and writes to the API server.
type Mirror struct {
	reg  MirrorRegistry
	kc   kubernetes.Interface
	opts Options
	log  *slog.Logger

	// What the mirror wrote, as the API server holds it: read from these
	// caches, a pass over unchanged services makes no API call.
	services, slices []cache.SharedIndexInformer // one per namespace

	synced atomic.Bool
	ready  chan struct{}

	mu     sync.Mutex
	warned map[naming.ServiceKey]string // the last skip logged per service
	kicked map[naming.ServiceKey]bool   // changed in Kubernetes: redo
	kick   chan struct{}
}

// NewMirror returns a Mirror into the cluster cfg names.
func NewMirror(cfg *rest.Config, reg MirrorRegistry, opts Options) (*Mirror, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sextant"
	}
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	m := &Mirror{reg: reg, kc: kc, opts: opts, log: opts.Logger, ready: make(chan struct{}), warned: map[naming.ServiceKey]string{},
		kicked: map[naming.ServiceKey]bool{}, kick: make(chan struct{}, 1)}
	namespaces := opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		svcs := kc.CoreV1().Services(ns)
		m.services = append(m.services, cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = managedByService + "=" + ManagedBy
				return svcs.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = managedByService + "=" + ManagedBy
				return svcs.Watch(ctx, o)
			},
		}, &corev1.Service{}, 0, cache.Indexers{}))
		eps := kc.DiscoveryV1().EndpointSlices(ns)
		m.slices = append(m.slices, cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = discoveryv1.LabelManagedBy + "=" + ManagedBy
				return eps.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = discoveryv1.LabelManagedBy + "=" + ManagedBy
				return eps.Watch(ctx, o)
			},
		}, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{byService: func(obj any) ([]string, error) {
			es := obj.(*discoveryv1.EndpointSlice)
			return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
		}}))
	}
	// A mirrored object changed or deleted by someone else (or ours, seen
	// late) redoes its service: the registry is the truth.
	for _, inf := range append(slices.Clone(m.services), m.slices...) {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    m.kickObject,
			UpdateFunc: func(_, obj any) { m.kickObject(obj) },
			DeleteFunc: m.kickObject,
		}); err != nil {
			return nil, fmt.Errorf("kube: %w", err)
		}
	}
	return m, nil
}

func (m *Mirror) kickObject(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	var k naming.ServiceKey
	switch o := obj.(type) {
	case *corev1.Service:
		k = naming.ServiceKey{Namespace: o.Namespace, Name: o.Name}
	case *discoveryv1.EndpointSlice:
		k = naming.ServiceKey{Namespace: o.Namespace, Name: o.Labels[discoveryv1.LabelServiceName]}
	default:
		return
	}
	m.mu.Lock()
	m.kicked[k] = true
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

const byService = "service"

// cachedService is the mirrored Service k as last seen, nil if none.
func (m *Mirror) cachedService(k naming.ServiceKey) *corev1.Service {
	for _, inf := range m.services {
		if obj, ok, _ := inf.GetStore().GetByKey(k.Namespace + "/" + k.Name); ok {
			return obj.(*corev1.Service)
		}
	}
	return nil
}

// cachedSlices are service k's mirrored EndpointSlices as last seen.
func (m *Mirror) cachedSlices(k naming.ServiceKey) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, inf := range m.slices {
		objs, _ := inf.GetIndexer().ByIndex(byService, k.Namespace+"/"+k.Name)
		for _, o := range objs {
			out = append(out, o.(*discoveryv1.EndpointSlice))
		}
	}
	return out
}

// Synced reports whether the first full pass is written.
func (m *Mirror) Synced() bool { return m.synced.Load() }

// WaitSynced waits for the first full pass.
func (m *Mirror) WaitSynced(ctx context.Context) error {
	select {
	case <-m.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Mirror) allowed(ns string) bool {
	if slices.Contains(m.opts.Exclude, ns) {
		return false
	}
	return len(m.opts.Namespaces) == 0 || slices.Contains(m.opts.Namespaces, ns)
}

// Run mirrors until ctx ends: a full pass (every service, and the removal
// of mirrored Services the registry no longer has), then each changed
// service. A service whose write fails is retried a second later.
func (m *Mirror) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var synced []cache.InformerSynced
	for _, inf := range append(slices.Clone(m.services), m.slices...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	dirty := map[naming.ServiceKey]bool{}
	var sub *catalog.Subscription
	full := true
	for ctx.Err() == nil {
		if full {
			// From a snapshot, then its changes: none missed between.
			snap := m.reg.Instances().Snapshot()
			var err error
			if sub, err = m.reg.Catalog().Subscribe(snap.Revision(), store.Instances); err != nil {
				return fmt.Errorf("kube: mirror: %w", err)
			}
			for _, ns := range snap.Namespaces() {
				for _, g := range snap.Groups(ns) {
					dirty[g.Key] = true
				}
			}
			// And those it wrote that the registry may no longer have.
			for _, inf := range m.services {
				for _, obj := range inf.GetStore().List() {
					svc := obj.(*corev1.Service)
					dirty[naming.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}] = true
				}
			}
			full = false
		}
		for _, k := range slices.SortedFunc(maps.Keys(dirty), naming.ServiceKey.Compare) {
			if err := m.reconcile(ctx, k); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				m.log.Warn("mirroring a service to Kubernetes failed; retrying", "service", k.String(), "err", err)
				continue
			}
			delete(dirty, k)
		}
		if !m.synced.Load() && len(dirty) == 0 {
			m.synced.Store(true)
			close(m.ready)
		}
		changes, err := m.next(ctx, sub, len(dirty) > 0)
		if errors.Is(err, catalog.ErrCompacted) {
			full = true
		}
		for _, c := range changes {
			dirty[c.Key] = true
		}
		m.mu.Lock()
		for k := range m.kicked {
			dirty[k] = true
		}
		clear(m.kicked)
		m.mu.Unlock()
	}
	return nil
}

// next waits for the registry's next changes, or a kick from Kubernetes'
// side, or (retry) a second; its error is ErrCompacted or the wait's end.
func (m *Mirror) next(ctx context.Context, sub *catalog.Subscription, retry bool) ([]catalog.Change, error) {
	wait, cancel := context.WithCancel(ctx)
	defer cancel()
	if retry {
		wait, cancel = context.WithTimeout(wait, time.Second)
		defer cancel()
	}
	go func() {
		select {
		case <-m.kick:
			if wait.Err() != nil {
				// Too late for this wait: leave it to the next.
				select {
				case m.kick <- struct{}{}:
				default:
				}
			}
			cancel()
		case <-wait.Done():
		}
	}()
	return sub.Next(wait, 4096)
}

// skip logs, once per reason, why service k is not mirrored.
func (m *Mirror) skip(k naming.ServiceKey, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.warned[k] == why {
		return
	}
	m.warned[k] = why
	m.log.Info("not mirroring a service to Kubernetes", "service", k.String(), "why", why)
}

// reconcile writes service k's Service and EndpointSlices as the registry
// holds it now, or removes them.
func (m *Mirror) reconcile(ctx context.Context, k naming.ServiceKey) error {
	if !m.allowed(k.Namespace) {
		return nil
	}
	var ins []*instance.Instance
	if g := m.reg.Instances().Lookup(k); g != nil {
		ins = g.Items()
	}
	for _, in := range ins {
		if v, _ := in.Metadata.Get(instance.OwnerLabel); v != "" {
			// Kubernetes' own (or another sync's): not ours to publish.
			m.skip(k, "it has instances owned by "+v)
			return nil
		}
	}
	if len(validation.IsDNS1035Label(k.Name)) > 0 {
		if len(ins) > 0 {
			m.skip(k, "its name is not a Kubernetes Service name (a DNS-1035 label)")
		}
		return nil
	}
	services := m.kc.CoreV1().Services(k.Namespace)
	cur := m.cachedService(k)
	want := desiredSlices(k, ins)
	if len(want) == 0 {
		// Gone: the slices go with their Service (and explicitly, should
		// a garbage collector not run).
		if err := m.syncSlices(ctx, k, nil); err != nil {
			return err
		}
		if cur != nil {
			if err := services.Delete(ctx, k.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	}
	ports := servicePorts(want)
	var err error
	if cur == nil {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: k.Name, Namespace: k.Namespace, Labels: map[string]string{managedByService: ManagedBy}},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: ports},
		}
		cur, err = services.Create(ctx, svc, metav1.CreateOptions{FieldManager: "sextant"})
		switch {
		case apierrors.IsNotFound(err):
			m.skip(k, "its namespace does not exist in Kubernetes")
			return nil
		case apierrors.IsAlreadyExists(err):
			// Not in the cache of ours: the user's (or ours, written a
			// moment ago and not seen yet: the next pass finds it).
			got, gerr := services.Get(ctx, k.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			if got.Labels[managedByService] != ManagedBy {
				m.skip(k, "a Service of that name exists, not written by Sextant")
				return nil
			}
			return fmt.Errorf("kube: mirror: Service %s written a moment ago, not seen yet", k)
		case err != nil:
			return err
		}
	} else if !samePorts(cur.Spec.Ports, ports) {
		upd := cur.DeepCopy()
		upd.Spec.Ports = ports
		if cur, err = services.Update(ctx, upd, metav1.UpdateOptions{FieldManager: "sextant"}); err != nil {
			return err
		}
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: cur.Name, UID: cur.UID}
	for _, es := range want {
		es.OwnerReferences = []metav1.OwnerReference{owner}
	}
	return m.syncSlices(ctx, k, want)
}

// syncSlices makes service k's mirrored EndpointSlices want.
func (m *Mirror) syncSlices(ctx context.Context, k naming.ServiceKey, want []*discoveryv1.EndpointSlice) error {
	api := m.kc.DiscoveryV1().EndpointSlices(k.Namespace)
	have := map[string]*discoveryv1.EndpointSlice{}
	for _, es := range m.cachedSlices(k) {
		have[es.Name] = es
	}
	var err error
	// Written before the old ones go: no moment without endpoints.
	for _, es := range want {
		cur := have[es.Name]
		delete(have, es.Name)
		switch {
		case cur == nil:
			// A conflict (written a moment ago, not seen yet) is retried.
			_, err = api.Create(ctx, es, metav1.CreateOptions{FieldManager: "sextant"})
		case !reflect.DeepEqual(cur.Endpoints, es.Endpoints) || !reflect.DeepEqual(cur.Ports, es.Ports):
			es.ResourceVersion = cur.ResourceVersion
			_, err = api.Update(ctx, es, metav1.UpdateOptions{FieldManager: "sextant"})
		}
		if err != nil {
			return err
		}
	}
	for name := range have {
		if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// desiredSlices are service k's EndpointSlices for instances ins: one per
// port and address family, named SERVICE-sextant-PORT (-v6), endpoints in
// address order. An instance whose host is not an IP address (a DNS name)
// has no place in an EndpointSlice of addresses and is left out.
func desiredSlices(k naming.ServiceKey, ins []*instance.Instance) []*discoveryv1.EndpointSlice {
	type slot struct {
		port int
		v6   bool
	}
	bySlot := map[slot][]*instance.Instance{}
	for _, in := range ins {
		ip, err := netip.ParseAddr(in.Host)
		if err != nil || in.Port <= 0 {
			continue
		}
		s := slot{in.Port, ip.Unmap().Is6()}
		bySlot[s] = append(bySlot[s], in)
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(bySlot))
	for s, group := range bySlot {
		name := k.Name + "-sextant-" + strconv.Itoa(s.port)
		at := discoveryv1.AddressTypeIPv4
		if s.v6 {
			name += "-v6"
			at = discoveryv1.AddressTypeIPv6
		}
		slices.SortFunc(group, func(a, b *instance.Instance) int {
			if c := netip.MustParseAddr(a.Host).Compare(netip.MustParseAddr(b.Host)); c != 0 {
				return c
			}
			return compareStrings(a.ID, b.ID)
		})
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.Namespace, Labels: map[string]string{
				discoveryv1.LabelServiceName: k.Name, discoveryv1.LabelManagedBy: ManagedBy,
			}},
			AddressType: at,
			Ports:       []discoveryv1.EndpointPort{{Name: ptrTo(portName(s.port)), Port: ptrTo(int32(s.port)), Protocol: ptrTo(corev1.ProtocolTCP)}},
		}
		if p := group[0].Protocol; p != "" {
			es.Ports[0].AppProtocol = ptrTo(p)
		}
		seen := map[string]bool{}
		for _, in := range group {
			addr := netip.MustParseAddr(in.Host).Unmap().String()
			if seen[addr] {
				continue // two instances at one address and port: one endpoint
			}
			seen[addr] = true
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{addr},
				Conditions: discoveryv1.EndpointConditions{
					Ready: ptrTo(in.ItemReady()), Serving: ptrTo(in.Healthy), Terminating: ptrTo(in.Isolated),
				},
			})
		}
		out = append(out, es)
	}
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return compareStrings(a.Name, b.Name) })
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func ptrTo[T any](v T) *T { return &v }

func portName(port int) string { return "port-" + strconv.Itoa(port) }

// servicePorts are the Service's ports: one per slice port, the port
// itself as the target.
func servicePorts(want []*discoveryv1.EndpointSlice) []corev1.ServicePort {
	seen := map[int32]bool{}
	var out []corev1.ServicePort
	for _, es := range want {
		p := es.Ports[0]
		if seen[*p.Port] {
			continue
		}
		seen[*p.Port] = true
		out = append(out, corev1.ServicePort{Name: *p.Name, Port: *p.Port, TargetPort: intstr.FromInt32(*p.Port), Protocol: corev1.ProtocolTCP, AppProtocol: p.AppProtocol})
	}
	slices.SortFunc(out, func(a, b corev1.ServicePort) int { return int(a.Port) - int(b.Port) })
	return out
}

// samePorts compares the fields the mirror sets.
func samePorts(a, b []corev1.ServicePort) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.ServicePort) bool {
		return x.Name == y.Name && x.Port == y.Port && x.TargetPort == y.TargetPort && x.Protocol == y.Protocol &&
			reflect.DeepEqual(x.AppProtocol, y.AppProtocol)
	})
}
