package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// Registry is where the sync writes: one Sync per change, and the
// instances it already owns (from before a restart).
type Registry interface {
	Sync(ctx context.Context, owner string, put []*instance.Instance, del []string) (int64, error)
	Instances() *registry.Instances
}

// Options configure a Syncer.
type Options struct {
	// Namespaces are the only namespaces synced (empty: all but Exclude);
	// with a list, the watches are per namespace, so a Role per namespace
	// is enough RBAC.
	Namespaces []string
	// Exclude are namespaces never synced.
	Exclude []string
	// Logger receives the sync's logs (nil: discard).
	Logger *slog.Logger
}

// Config is the client configuration of kubeconfig, or the in-cluster
// configuration (the pod's service account) when kubeconfig is "".
func Config(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kube: in-cluster config (no --kubeconfig given): %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kube: kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// Syncer keeps the registry's Kubernetes instances in step with the
// cluster's EndpointSlices.
//
// Goroutines: Run owns the informers' goroutines (the client-go
// reflectors, which resume a broken watch from its last resource version)
// and one worker that converts and writes. Event handlers only queue the
// keys of the slices to redo.
type Syncer struct {
	reg  Registry
	opts Options
	log  *slog.Logger

	slices []cache.SharedIndexInformer
	pods   []cache.SharedIndexInformer
	nodes  cache.SharedIndexInformer // nil: topology from the slices alone

	mu      sync.Mutex
	pending map[string]struct{} // slice keys to redo
	wake    chan struct{}
	byPod   map[string]map[string]struct{} // "ns/pod" -> slice keys
	byNode  map[string]map[string]struct{} // node -> slice keys
	refs    map[string]refs                // slice key -> what it names

	// The worker's: what each slice last wrote, and which slice an
	// instance id is from (an address may move between slices).
	applied map[string]map[string]*instance.Instance
	from    map[string]string

	synced atomic.Bool
	ready  chan struct{}
	writes atomic.Int64
}

// New returns a Syncer over the cluster cfg names.
func New(cfg *rest.Config, reg Registry, opts Options) (*Syncer, error) {
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
	dc, err := discoveryclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	cc, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	s := &Syncer{
		reg: reg, opts: opts, log: opts.Logger,
		pending: map[string]struct{}{}, wake: make(chan struct{}, 1),
		byPod: map[string]map[string]struct{}{}, byNode: map[string]map[string]struct{}{}, refs: map[string]refs{},
		applied: map[string]map[string]*instance.Instance{}, from: map[string]string{},
		ready: make(chan struct{}),
	}
	namespaces := opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		si := cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return dc.EndpointSlices(ns).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return dc.EndpointSlices(ns).Watch(ctx, o)
			},
		}, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
		if _, err := si.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.queueSlice(obj) },
			UpdateFunc: func(_, obj any) { s.queueSlice(obj) },
			DeleteFunc: func(obj any) { s.queueSlice(obj) },
		}); err != nil {
			return nil, fmt.Errorf("kube: %w", err)
		}
		s.slices = append(s.slices, si)
		pi := cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cc.Pods(ns).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cc.Pods(ns).Watch(ctx, o)
			},
		}, &corev1.Pod{}, 0, cache.Indexers{})
		// Pods are only looked up by the worker: a pod seen after its
		// slice (or relabelled) redoes the slices that name it.
		if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { s.queueRef(obj) },
			UpdateFunc: func(old, obj any) {
				if o, n := old.(*corev1.Pod), obj.(*corev1.Pod); !maps.Equal(o.Labels, n.Labels) {
					s.queueRef(obj)
				}
			},
		}); err != nil {
			return nil, fmt.Errorf("kube: %w", err)
		}
		s.pods = append(s.pods, pi)
	}
	s.nodes = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cc.Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cc.Nodes().Watch(ctx, o)
		},
	}, &corev1.Node{}, 0, cache.Indexers{})
	if _, err := s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.queueRef(obj) },
		UpdateFunc: func(old, obj any) {
			if o, n := old.(*corev1.Node), obj.(*corev1.Node); o.Labels[ZoneLabel] != n.Labels[ZoneLabel] || o.Labels[RegionLabel] != n.Labels[RegionLabel] {
				s.queueRef(obj)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	return s, nil
}

// allowed reports whether namespace ns is synced.
func (s *Syncer) allowed(ns string) bool {
	if slices.Contains(s.opts.Exclude, ns) {
		return false
	}
	return len(s.opts.Namespaces) == 0 || slices.Contains(s.opts.Namespaces, ns)
}

func (s *Syncer) queueSlice(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		s.queue(d.Key)
		return
	}
	if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
		s.queue(sliceKey(es))
	}
}

// queueRef queues the slices that name a pod or node.
func (s *Syncer) queueRef(obj any) {
	var keys map[string]struct{}
	s.mu.Lock()
	switch o := obj.(type) {
	case *corev1.Pod:
		keys = s.byPod[o.Namespace+"/"+o.Name]
	case *corev1.Node:
		keys = s.byNode[o.Name]
	}
	for k := range keys {
		s.pending[k] = struct{}{}
	}
	s.mu.Unlock()
	if len(keys) > 0 {
		s.signal()
	}
}

func (s *Syncer) queue(key string) {
	s.mu.Lock()
	s.pending[key] = struct{}{}
	s.mu.Unlock()
	s.signal()
}

func (s *Syncer) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Synced reports whether the first full sync is written: from then on the
// registry holds what the cluster says.
func (s *Syncer) Synced() bool { return s.synced.Load() }

// WaitSynced waits for the first full sync.
func (s *Syncer) WaitSynced(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Writes is how many registry writes the sync made, for tests and
// figures (a resumed watch makes none for what did not change).
func (s *Syncer) Writes() int64 { return s.writes.Load() }

// Run watches until ctx ends. It writes the first full sync once every
// watch has listed, then each change as it comes.
func (s *Syncer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	informers := append(append(slices.Clone(s.slices), s.pods...), s.nodes)
	for _, inf := range informers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	var synced []cache.InformerSynced
	for _, inf := range informers {
		synced = append(synced, inf.HasSynced)
	}
	s.log.Info("listing", "namespaces", s.opts.Namespaces, "exclude", s.opts.Exclude)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	if err := s.initial(ctx); err != nil {
		return err
	}
	s.synced.Store(true)
	close(s.ready)
	s.log.Info("synced", "slices", len(s.applied), "instances", len(s.from))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
		s.drain(ctx)
	}
}

// initial writes every slice, then deletes what the registry holds of
// Kubernetes that no slice names any more (a slice deleted while Sextant
// was down): added before removed, so no service empties on the way.
func (s *Syncer) initial(ctx context.Context) error {
	s.drain(ctx)
	var stale []string
	snap := s.reg.Instances().Snapshot()
	for _, g := range snap.Groups("") {
		for _, in := range g.Items() {
			if v, _ := in.Metadata.Get(instance.OwnerLabel); v == Owner {
				if _, ok := s.from[in.ID]; !ok {
					stale = append(stale, in.ID)
				}
			}
		}
	}
	for len(stale) > 0 {
		n := min(len(stale), instance.MaxBatch)
		if err := s.write(ctx, nil, stale[:n]); err != nil {
			return err
		}
		stale = stale[n:]
	}
	return ctx.Err()
}

// drain redoes every pending slice, one registry write each.
func (s *Syncer) drain(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		keys := make([]string, 0, len(s.pending))
		for k := range s.pending {
			keys = append(keys, k)
		}
		clear(s.pending)
		s.mu.Unlock()
		if len(keys) == 0 {
			return
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := s.apply(ctx, k); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("sync of an EndpointSlice failed; retrying", "slice", k, "err", err)
				s.mu.Lock()
				s.pending[k] = struct{}{}
				s.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}
	}
}

// apply writes what one slice holds now: its new and changed instances and
// the removal of those it no longer has, in one registry write.
func (s *Syncer) apply(ctx context.Context, key string) error {
	var want []*instance.Instance
	var es *discoveryv1.EndpointSlice
	ns, _, _ := cut(key)
	if s.allowed(ns) {
		for _, inf := range s.slices {
			if obj, ok, _ := inf.GetStore().GetByKey(key); ok {
				es = obj.(*discoveryv1.EndpointSlice)
				break
			}
		}
	}
	if es != nil && es.Labels[discoveryv1.LabelManagedBy] == ManagedBy {
		// The mirror's: the registry's own instances, not Kubernetes'.
		es = nil
	}
	if es != nil {
		want = convert(es, s)
	}
	prev := s.applied[key]
	var put []*instance.Instance
	next := make(map[string]*instance.Instance, len(want))
	for _, in := range want {
		next[in.ID] = in
		if p := prev[in.ID]; p != nil && p.SameSpec(in) && s.from[in.ID] == key {
			next[in.ID] = p
			continue
		}
		put = append(put, in)
	}
	var del []string
	for id := range prev {
		if _, ok := next[id]; !ok && s.from[id] == key {
			del = append(del, id)
		}
	}
	if len(put) > instance.MaxBatch {
		// A slice holds at most 1,000 endpoints; ports multiply them.
		return fmt.Errorf("kube: slice %s has %d endpoints and ports, more than one write takes (%d)", key, len(put), instance.MaxBatch)
	}
	if err := s.write(ctx, put, del); err != nil {
		return err
	}
	for _, id := range del {
		delete(s.from, id)
	}
	for id := range next {
		s.from[id] = key
	}
	if es == nil {
		delete(s.applied, key)
	} else {
		s.applied[key] = next
	}
	s.index(key, es)
	return nil
}

func (s *Syncer) write(ctx context.Context, put []*instance.Instance, del []string) error {
	if len(put) == 0 && len(del) == 0 {
		return nil
	}
	s.writes.Add(1)
	_, err := s.reg.Sync(ctx, Owner, put, del)
	var owned *registry.OwnedError
	if errors.As(err, &owned) {
		return fmt.Errorf("kube: %w", err)
	}
	return err
}

// index notes the pods and nodes slice key names, so that their changes
// redo it.
func (s *Syncer) index(key string, es *discoveryv1.EndpointSlice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.refs[key]
	for _, p := range old.pods {
		if keys := s.byPod[p]; keys != nil {
			if delete(keys, key); len(keys) == 0 {
				delete(s.byPod, p)
			}
		}
	}
	for _, n := range old.nodes {
		if keys := s.byNode[n]; keys != nil {
			if delete(keys, key); len(keys) == 0 {
				delete(s.byNode, n)
			}
		}
	}
	if es == nil {
		delete(s.refs, key)
		return
	}
	add := func(m map[string]map[string]struct{}, k string) {
		if m[k] == nil {
			m[k] = map[string]struct{}{}
		}
		m[k][key] = struct{}{}
	}
	var r refs
	for i := range es.Endpoints {
		ep := &es.Endpoints[i]
		if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" {
			p := es.Namespace + "/" + ref.Name
			add(s.byPod, p)
			r.pods = append(r.pods, p)
		}
		if ep.NodeName != nil {
			add(s.byNode, *ep.NodeName)
			r.nodes = append(r.nodes, *ep.NodeName)
		}
	}
	s.refs[key] = r
}

// refs are the pods and nodes a slice names.
type refs struct{ pods, nodes []string }

// pod implements objects from the pod watches.
func (s *Syncer) pod(ns, name string) *corev1.Pod {
	for _, inf := range s.pods {
		if obj, ok, _ := inf.GetStore().GetByKey(ns + "/" + name); ok {
			return obj.(*corev1.Pod)
		}
	}
	return nil
}

// node implements objects from the node watch.
func (s *Syncer) node(name string) *corev1.Node {
	if obj, ok, _ := s.nodes.GetStore().GetByKey(name); ok {
		return obj.(*corev1.Node)
	}
	return nil
}

func cut(key string) (ns, name string, ok bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}
