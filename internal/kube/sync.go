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

	synced  atomic.Bool
	ready   chan struct{}
	writes  atomic.Int64 // slices written (Writes)
	commits atomic.Int64 // registry writes (Commits)
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

// Writes is how many slice writes the sync made, for tests and figures (a
// resumed watch makes none for what did not change). Slices changed
// together share one registry write (Commits).
func (s *Syncer) Writes() int64 { return s.writes.Load() }

// Commits is how many registry writes the sync made.
func (s *Syncer) Commits() int64 { return s.commits.Load() }

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
		if err := s.write(ctx, nil, stale[:n], 1); err != nil {
			return err
		}
		stale = stale[n:]
	}
	return ctx.Err()
}

// drain redoes every pending slice. The slices pending together go in one
// registry write (up to instance.MaxBatch instances and removals): the
// registry shares a commit and its fsync only between writes waiting
// together, and this one worker never had two waiting, so each slice paid
// a commit of its own (BenchmarkSliceWrites: about 9x the time per slice).
// A batch that fails is redone slice by slice, so that one slice the
// registry refuses holds back only itself.
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
		var b batch
		for _, k := range keys {
			p, err := s.plan(k, b.from)
			if err != nil {
				s.failed(ctx, k, err)
				continue
			}
			if len(b.plans) > 0 && b.size+len(p.put)+len(p.del) > instance.MaxBatch {
				s.flush(ctx, &b)
			}
			b.add(p)
		}
		s.flush(ctx, &b)
	}
}

// failed logs a slice's failed write and queues it again after a pause.
func (s *Syncer) failed(ctx context.Context, key string, err error) {
	if ctx.Err() != nil {
		return
	}
	s.log.Warn("sync of an EndpointSlice failed; retrying", "slice", key, "err", err)
	s.mu.Lock()
	s.pending[key] = struct{}{}
	s.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}

// flush writes batch b in one registry write, or slice by slice if that
// fails, and empties it.
func (s *Syncer) flush(ctx context.Context, b *batch) {
	defer b.reset()
	if len(b.plans) == 0 {
		return
	}
	put, del := b.merged()
	err := s.write(ctx, put, del, b.writing())
	if err == nil {
		for _, p := range b.plans {
			s.commit(p)
		}
		return
	}
	if len(b.plans) == 1 {
		s.failed(ctx, b.plans[0].key, err)
		return
	}
	// One at a time, each planned again against what the ones before it
	// wrote.
	for _, p := range b.plans {
		if err := s.apply(ctx, p.key); err != nil {
			s.failed(ctx, p.key, err)
		}
	}
}

// apply writes what one slice holds now on its own.
func (s *Syncer) apply(ctx context.Context, key string) error {
	p, err := s.plan(key, nil)
	if err != nil {
		return err
	}
	if err := s.write(ctx, p.put, p.del, p.writes()); err != nil {
		return err
	}
	s.commit(p)
	return nil
}

// slicePlan is what one slice's write changes: its new and changed
// instances, the removal of those it no longer has, and its instances
// after.
type slicePlan struct {
	key  string
	es   *discoveryv1.EndpointSlice // nil: gone (or not synced)
	put  []*instance.Instance
	del  []string
	next map[string]*instance.Instance
}

func (p *slicePlan) writes() int64 {
	if len(p.put) == 0 && len(p.del) == 0 {
		return 0
	}
	return 1
}

// plan works out what slice key holds now against what was written.
// pending, when not nil, has the instance ids the slices planned before it
// in the same batch moved ("" for removed), ahead of s.from.
func (s *Syncer) plan(key string, pending map[string]string) (slicePlan, error) {
	from := func(id string) string {
		if k, ok := pending[id]; ok {
			return k
		}
		return s.from[id]
	}
	p := slicePlan{key: key}
	var want []*instance.Instance
	ns, _, _ := cut(key)
	if s.allowed(ns) {
		for _, inf := range s.slices {
			if obj, ok, _ := inf.GetStore().GetByKey(key); ok {
				p.es = obj.(*discoveryv1.EndpointSlice)
				break
			}
		}
	}
	if p.es != nil && p.es.Labels[discoveryv1.LabelManagedBy] == ManagedBy {
		// The mirror's: the registry's own instances, not Kubernetes'.
		p.es = nil
	}
	if p.es != nil {
		want = convert(p.es, s)
	}
	prev := s.applied[key]
	p.next = make(map[string]*instance.Instance, len(want))
	for _, in := range want {
		p.next[in.ID] = in
		if old := prev[in.ID]; old != nil && old.SameSpec(in) && from(in.ID) == key {
			p.next[in.ID] = old
			continue
		}
		p.put = append(p.put, in)
	}
	for id := range prev {
		if _, ok := p.next[id]; !ok && from(id) == key {
			p.del = append(p.del, id)
		}
	}
	if len(p.put) > instance.MaxBatch {
		// A slice holds at most 1,000 endpoints; ports multiply them.
		return slicePlan{}, fmt.Errorf("kube: slice %s has %d endpoints and ports, more than one write takes (%d)", key, len(p.put), instance.MaxBatch)
	}
	return p, nil
}

// commit records a written plan as the worker's state.
func (s *Syncer) commit(p slicePlan) {
	for _, id := range p.del {
		delete(s.from, id)
	}
	for id := range p.next {
		s.from[id] = p.key
	}
	if p.es == nil {
		delete(s.applied, p.key)
	} else {
		s.applied[p.key] = p.next
	}
	s.index(p.key, p.es)
}

// batch is the plans of slices written together.
type batch struct {
	plans []slicePlan
	size  int               // instances put and ids deleted
	from  map[string]string // ids the plans moved: slice key, "" removed
}

func (b *batch) add(p slicePlan) {
	if b.from == nil {
		b.from = map[string]string{}
	}
	for _, id := range p.del {
		b.from[id] = ""
	}
	for id := range p.next {
		b.from[id] = p.key
	}
	b.plans = append(b.plans, p)
	b.size += len(p.put) + len(p.del)
}

func (b *batch) reset() {
	b.plans, b.size, b.from = nil, 0, nil
}

// writing is how many slices of b change the registry.
func (b *batch) writing() int64 {
	var n int64
	for i := range b.plans {
		n += b.plans[i].writes()
	}
	return n
}

// merged is b's one write. An instance a later slice puts is not also
// deleted (the registry applies puts before deletes: an address moved
// from one slice to another would vanish), and one two slices put is put
// once, as the later one has it (what writing them in order leaves).
func (b *batch) merged() (put []*instance.Instance, del []string) {
	last := map[string]int{}
	for _, p := range b.plans {
		for _, in := range p.put {
			if i, ok := last[in.ID]; ok {
				put[i] = in
				continue
			}
			last[in.ID] = len(put)
			put = append(put, in)
		}
	}
	for _, p := range b.plans {
		for _, id := range p.del {
			if _, ok := last[id]; !ok {
				del = append(del, id)
			}
		}
	}
	return put, del
}

// write makes one registry write; n is how many slices' changes it
// carries (counted by Writes).
func (s *Syncer) write(ctx context.Context, put []*instance.Instance, del []string, n int64) error {
	if len(put) == 0 && len(del) == 0 {
		return nil
	}
	_, err := s.reg.Sync(ctx, Owner, put, del)
	if err == nil {
		s.writes.Add(n)
		s.commits.Add(1)
	}
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
