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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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

	synced atomic.Bool
	ready  chan struct{}

	mu     sync.Mutex
	warned map[naming.ServiceKey]string // the last skip logged per service
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
	return &Mirror{reg: reg, kc: kc, opts: opts, log: opts.Logger, ready: make(chan struct{}), warned: map[naming.ServiceKey]string{}}, nil
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
			if err := m.stale(ctx, dirty); err != nil {
				m.log.Warn("listing mirrored Services failed; retrying", "err", err)
				if !sleep(ctx, time.Second) {
					return nil
				}
				continue
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
		wait := ctx
		var cancel context.CancelFunc = func() {}
		if len(dirty) > 0 {
			wait, cancel = context.WithTimeout(ctx, time.Second)
		}
		changes, err := sub.Next(wait, 4096)
		cancel()
		switch {
		case errors.Is(err, catalog.ErrCompacted):
			full = true
		case err != nil:
			// The retry timer, or ctx's end.
		}
		for _, c := range changes {
			dirty[c.Key] = true
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// stale adds to dirty the services of the Services the mirror wrote that
// the registry may no longer have.
func (m *Mirror) stale(ctx context.Context, dirty map[naming.ServiceKey]bool) error {
	namespaces := m.opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		list, err := m.kc.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: managedByService + "=" + ManagedBy})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			dirty[naming.ServiceKey{Namespace: s.Namespace, Name: s.Name}] = true
		}
	}
	return nil
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
	cur, err := services.Get(ctx, k.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cur = nil
	case err != nil:
		return err
	case cur.Labels[managedByService] != ManagedBy:
		if len(ins) > 0 {
			m.skip(k, "a Service of that name exists, not written by Sextant")
		}
		return nil
	}
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
	if cur == nil {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: k.Name, Namespace: k.Namespace, Labels: map[string]string{managedByService: ManagedBy}},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: ports},
		}
		if cur, err = services.Create(ctx, svc, metav1.CreateOptions{FieldManager: "sextant"}); err != nil {
			if apierrors.IsNotFound(err) {
				m.skip(k, "its namespace does not exist in Kubernetes")
				return nil
			}
			return err
		}
	} else if !samePorts(cur.Spec.Ports, ports) {
		cur.Spec.Ports = ports
		if cur, err = services.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "sextant"}); err != nil {
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
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + ManagedBy + "," + discoveryv1.LabelServiceName + "=" + k.Name})
	if err != nil {
		return err
	}
	have := map[string]*discoveryv1.EndpointSlice{}
	for i := range list.Items {
		have[list.Items[i].Name] = &list.Items[i]
	}
	// Written before the old ones go: no moment without endpoints.
	for _, es := range want {
		cur := have[es.Name]
		delete(have, es.Name)
		switch {
		case cur == nil:
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
