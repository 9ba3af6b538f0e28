package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// ConfigWriter is where the Istio source writes: the server's write
// engine. Submit is called from the source's one worker goroutine and
// blocks until the write is committed (or refused).
type ConfigWriter interface {
	Submit(ctx context.Context, w commit.Write) (int64, error)
}

// istioResource is one Istio CRD Sextant reads.
type istioResource struct {
	group, resource, kind string
}

// istioResources are the CRDs read: the kinds Sextant serves. Each is read
// at the first of its group's istioVersions the API server serves.
var istioResources = []istioResource{
	{config.Group, "virtualservices", config.KindVirtualService},
	{config.Group, "destinationrules", config.KindDestinationRule},
	{config.Group, "gateways", config.KindGateway},
	{config.Group, "serviceentries", config.KindServiceEntry},
	{config.Group, "workloadentries", config.KindWorkloadEntry},
	{config.Group, "sidecars", config.KindSidecar},
	{config.SecurityGroup, "peerauthentications", config.KindPeerAuthentication},
	{config.SecurityGroup, "authorizationpolicies", config.KindAuthorizationPolicy},
	{config.SecurityGroup, "requestauthentications", config.KindRequestAuthentication},
	{config.TelemetryGroup, "telemetries", config.KindTelemetry},
}

// istioVersions are the versions of each group read, in order of
// preference: one object, whichever version it was written as, so the
// first served is enough (config.Decode reads each as v1). Telemetry's
// storage version is still v1alpha1, and older Istios serve only that.
var istioVersions = map[string][]string{
	config.Group:          {"v1", "v1beta1"},
	config.SecurityGroup:  {"v1", "v1beta1"},
	config.TelemetryGroup: {"v1", "v1alpha1"},
}

// Istio reads Istio's networking.istio.io, security.istio.io and
// telemetry.istio.io objects (istioResources) from the cluster's CRDs as
// Sextant's config for the synced namespaces: each is decoded and
// validated as "sextant config apply" does, written owned by "kubernetes"
// (config.AnnotationOwner, read-only through Sextant's APIs), and its
// result written back to the object's status as istiod writes its
// validation messages. A WorkloadEntry's write registers its instance in
// the same commit (config.WorkloadInstance), owned by the object and not
// by the EndpointSlice sync's Owner, so that sync never removes it.
//
// Goroutines: Run owns the informers' goroutines and one worker that
// decodes, writes and patches statuses. Event handlers only queue keys.
type Istio struct {
	w     ConfigWriter
	table *config.Table
	opts  Options
	log   *slog.Logger
	dyn   dynamic.Interface
	disc  discovery.DiscoveryInterface

	// Run's: the informers of each kind, one per namespace (added to
	// when a CRD is installed later, found every rediscover).
	informers  map[string][]istioInformer
	denied     map[string]bool // resources the server may not list, warned about
	rediscover time.Duration   // 0: 30 s
	// Registered, when set, warns of hosts naming services without
	// instances (config.ApplyWrite.Registered).
	registered func(naming.ServiceKey) bool

	mu      sync.Mutex
	pending map[config.Key]struct{}
	wake    chan struct{}

	synced atomic.Bool
	ready  chan struct{}
}

type istioInformer struct {
	gvr schema.GroupVersionResource
	inf cache.SharedIndexInformer
}

// NewIstio returns an Istio source over the cluster cfg names, writing
// through w; table is the config table w's writes land in. registered may
// be nil.
func NewIstio(cfg *rest.Config, w ConfigWriter, table *config.Table, registered func(naming.ServiceKey) bool, opts Options) (*Istio, error) {
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
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	return &Istio{
		w: w, table: table, opts: opts, log: opts.Logger, dyn: dyn, disc: disc, registered: registered,
		pending: map[config.Key]struct{}{}, wake: make(chan struct{}, 1), ready: make(chan struct{}),
	}, nil
}

// Synced reports whether the first full read is written: from then on
// Sextant's config for the synced namespaces is what the cluster holds.
func (s *Istio) Synced() bool { return s.synced.Load() }

// WaitSynced waits for the first full read.
func (s *Istio) WaitSynced(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// allowed reports whether namespace ns is synced.
func (s *Istio) allowed(ns string) bool {
	if slices.Contains(s.opts.Exclude, ns) {
		return false
	}
	return len(s.opts.Namespaces) == 0 || slices.Contains(s.opts.Namespaces, ns)
}

// discover finds the version each Istio resource is served at; a resource
// whose CRD is not installed, or not watched yet and which the server may
// not list, is left out (logged).
func (s *Istio) discover(ctx context.Context) (map[string]schema.GroupVersionResource, error) {
	out := map[string]schema.GroupVersionResource{}
	served := map[string]map[string]bool{} // group/version -> resources
	for _, r := range istioResources {
		for _, v := range istioVersions[r.group] {
			gv := r.group + "/" + v
			if served[gv] == nil {
				served[gv] = map[string]bool{}
				list, err := s.disc.ServerResourcesForGroupVersion(gv)
				if err != nil && !apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("kube: discovering %s: %w", gv, err)
				}
				if list != nil {
					for _, res := range list.APIResources {
						served[gv][res.Name] = true
					}
				}
			}
			if served[gv][r.resource] {
				out[r.kind] = schema.GroupVersionResource{Group: r.group, Version: v, Resource: r.resource}
				break
			}
		}
		gvr, ok := out[r.kind]
		if !ok {
			s.log.Debug("Istio's CRD is not installed; its kind is read once it is", "resource", r.resource+"."+r.group)
			continue
		}
		if len(s.informers[r.kind]) > 0 {
			continue
		}
		if ok, err := s.readable(ctx, gvr); err != nil {
			return nil, err
		} else if !ok {
			delete(out, r.kind)
		}
	}
	return out, ctx.Err()
}

// readable reports whether the server may list gvr in every synced
// namespace. An informer the API server refuses retries for ever, and the
// first read waits for every informer: a kind the RBAC does not grant (a
// ClusterRole from before Sextant read it) is left out as if not
// installed, warned once, and looked for again at each rediscover.
func (s *Istio) readable(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
	for _, ns := range s.namespaces() {
		_, err := s.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
		switch {
		case apierrors.IsForbidden(err):
			where := "namespace " + ns
			if ns == metav1.NamespaceAll {
				where = "the cluster"
			}
			res := gvr.Resource + "." + gvr.Group
			if s.denied[res] {
				s.log.Debug("still not allowed to list Istio objects", "resource", res, "in", where)
			} else {
				if s.denied == nil {
					s.denied = map[string]bool{}
				}
				s.denied[res] = true
				s.log.Warn("not allowed to list Istio objects: their kind is not read until the RBAC grants get, list and watch (deploy/kubernetes/rbac.yaml)",
					"resource", res, "in", where, "err", err)
			}
			return false, nil
		case apierrors.IsNotFound(err):
			return false, nil // the CRD went since discovery
		case err != nil:
			return false, fmt.Errorf("kube: listing %s: %w", gvr.Resource+"."+gvr.Group, err)
		}
	}
	return true, nil
}

// namespaces are the namespaces watched: each synced one, or the whole
// cluster.
func (s *Istio) namespaces() []string {
	if len(s.opts.Namespaces) == 0 {
		return []string{metav1.NamespaceAll}
	}
	return s.opts.Namespaces
}

// Run reads until ctx ends: it finds the served CRDs (retrying while the
// API server is unreachable), writes the first full read once every watch
// has listed, then each change as it comes; every 30 s it looks for CRDs
// installed (or kinds permitted) since.
func (s *Istio) Run(ctx context.Context) error {
	var gvrs map[string]schema.GroupVersionResource
	for {
		var err error
		if gvrs, err = s.discover(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("discovering Istio's CRDs failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	if len(gvrs) == 0 {
		s.log.Info("Istio's CRDs are not installed: no Istio config is read until they are (looked for every 30 s)")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.informers = map[string][]istioInformer{}
	started, err := s.watch(ctx, &wg, gvrs)
	if err != nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), started...) {
		return nil
	}
	s.initial(ctx)
	if ctx.Err() != nil {
		return nil
	}
	s.synced.Store(true)
	close(s.ready)
	s.log.Info("Istio config synced", "kinds", slices.Sorted(maps.Keys(gvrs)))
	every := s.rediscover
	if every == 0 {
		every = 30 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-tick.C:
			// A CRD installed since: its objects are read from now on
			// (their adds queue them).
			if gvrs, err := s.discover(ctx); err == nil {
				if _, err := s.watch(ctx, &wg, gvrs); err != nil {
					return err
				}
			}
		}
		s.drain(ctx)
	}
}

// watch starts an informer per served resource not watched yet and synced
// namespace, owned by wg, and returns their HasSynced.
func (s *Istio) watch(ctx context.Context, wg *sync.WaitGroup, gvrs map[string]schema.GroupVersionResource) ([]cache.InformerSynced, error) {
	namespaces := s.namespaces()
	var started []cache.InformerSynced
	for kind, gvr := range gvrs {
		if len(s.informers[kind]) > 0 {
			continue
		}
		s.log.Info("reading Istio objects", "resource", gvr.Resource+"."+gvr.Group, "version", gvr.Version)
		for _, ns := range namespaces {
			ri := s.dyn.Resource(gvr).Namespace(ns)
			inf := cache.NewSharedIndexInformer(&cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return ri.List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return ri.Watch(ctx, o)
				},
			}, &unstructured.Unstructured{}, 0, cache.Indexers{})
			queue := func(obj any) { s.queueObject(kind, obj) }
			if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc: queue,
				UpdateFunc: func(old, obj any) {
					// Our own status writes come back as updates: only a
					// change of spec (generation), labels or annotations
					// is redone.
					o, n := old.(*unstructured.Unstructured), obj.(*unstructured.Unstructured)
					if o.GetGeneration() != n.GetGeneration() || !maps.Equal(o.GetLabels(), n.GetLabels()) || !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) {
						queue(obj)
					}
				},
				DeleteFunc: queue,
			}); err != nil {
				return nil, fmt.Errorf("kube: %w", err)
			}
			s.informers[kind] = append(s.informers[kind], istioInformer{gvr: gvr, inf: inf})
			wg.Add(1)
			go func() {
				defer wg.Done()
				inf.RunWithContext(ctx)
			}()
			started = append(started, inf.HasSynced)
		}
	}
	return started, nil
}

func (s *Istio) queueObject(kind string, obj any) {
	var ns, name string
	switch o := obj.(type) {
	case cache.DeletedFinalStateUnknown:
		ns, name, _ = cut(o.Key)
	case *unstructured.Unstructured:
		ns, name = o.GetNamespace(), o.GetName()
	default:
		return
	}
	s.mu.Lock()
	s.pending[config.Key{Kind: kind, Namespace: ns, Name: name}] = struct{}{}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// initial writes every object, then deletes the objects Sextant holds from
// Kubernetes that the cluster no longer has (deleted while Sextant was
// down, or of a namespace no longer synced).
func (s *Istio) initial(ctx context.Context) {
	s.drain(ctx)
	entries, _ := s.table.List("", "")
	for _, e := range entries {
		if e.Object.Owner() != Owner {
			continue
		}
		if obj, _ := s.lookup(e.Object.Key); obj == nil {
			s.mu.Lock()
			s.pending[e.Object.Key] = struct{}{}
			s.mu.Unlock()
		}
	}
	s.drain(ctx)
}

// lookup returns the object k names as the watches hold it, nil if absent
// or of a namespace not synced.
func (s *Istio) lookup(k config.Key) (*unstructured.Unstructured, schema.GroupVersionResource) {
	if !s.allowed(k.Namespace) {
		return nil, schema.GroupVersionResource{}
	}
	for _, i := range s.informers[k.Kind] {
		if obj, ok, _ := i.inf.GetStore().GetByKey(k.Namespace + "/" + k.Name); ok {
			return obj.(*unstructured.Unstructured), i.gvr
		}
	}
	return nil, schema.GroupVersionResource{}
}

// drain redoes every pending object; one that fails for a reason other
// than its content is retried a second later.
func (s *Istio) drain(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		keys := slices.SortedFunc(maps.Keys(s.pending), applyOrder)
		clear(s.pending)
		s.mu.Unlock()
		if len(keys) == 0 {
			return
		}
		for _, k := range keys {
			if err := s.apply(ctx, k); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("sync of an Istio object failed; retrying", "object", k.String(), "err", err)
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

// applyOrder is the order drain writes keys in: WorkloadEntries first, so
// that the instances they register are there when the objects naming
// their services are checked for instances (config.ApplyWrite's
// Registered warning); then by key.
func applyOrder(a, b config.Key) int {
	if wa, wb := a.Kind == config.KindWorkloadEntry, b.Kind == config.KindWorkloadEntry; wa != wb {
		if wa {
			return -1
		}
		return 1
	}
	return a.Compare(b)
}

// apply writes what the cluster holds of k now, and its result to its
// status. An error is one to retry (the write engine's); a problem with
// the object itself goes to its status.
func (s *Istio) apply(ctx context.Context, k config.Key) error {
	obj, gvr := s.lookup(k)
	if obj == nil {
		e := s.table.Get(k)
		if e == nil || e.Object.Owner() != Owner {
			return nil // never written, or not ours (refused at its apply)
		}
		_, err := s.w.Submit(ctx, &config.DeleteWrite{Key: k, Owner: Owner})
		if errors.Is(err, config.ErrNotFound) {
			err = nil
		}
		return err
	}
	res := istioResult{generation: obj.GetGeneration()}
	objs, err := config.Decode(istioDocument(obj))
	if err == nil {
		aw := &config.ApplyWrite{Objects: objs, Table: s.table, Owner: Owner, Registered: s.registered}
		if _, err = s.w.Submit(ctx, aw); err == nil {
			for _, r := range aw.Results {
				res.warnings = append(res.warnings, r.Warnings...)
			}
		}
	}
	if err != nil {
		if !objectProblem(err) {
			return err
		}
		res.problems = problems(err)
		res.conflict = !errors.Is(err, config.ErrInvalid) && !errors.As(err, new(config.Errors))
		if s.table.Get(k) != nil {
			res.kept = true
		}
	}
	s.writeStatus(ctx, obj, gvr, res)
	return nil
}

// objectProblem reports whether err is about the object (its content, or
// a conflict with another object), not a failure to retry.
func objectProblem(err error) bool {
	var fes config.Errors
	var fe *config.FieldError
	var ce *config.ClaimError
	var oe *config.OwnedError
	return errors.As(err, &fes) || errors.As(err, &fe) || errors.As(err, &ce) || errors.As(err, &oe) ||
		errors.Is(err, config.ErrInvalid) || errors.Is(err, config.ErrConflict)
}

// problems lists err's problems, one line each, without the package
// prefix.
func problems(err error) []string {
	var fes config.Errors
	if errors.As(err, &fes) {
		out := make([]string, len(fes))
		for i, fe := range fes {
			out[i] = strings.TrimPrefix(fe.Error(), "config: ")
		}
		return out
	}
	return []string{strings.TrimPrefix(err.Error(), "config: ")}
}

// istioDocument is the object as "sextant config apply" would read it:
// apiVersion, kind, metadata (name, namespace, labels, annotations but
// kubectl's) and spec. Kubernetes' own metadata (ownerReferences,
// finalizers, managedFields) is Kubernetes' business, and the status is
// ours.
func istioDocument(obj *unstructured.Unstructured) []byte {
	meta := map[string]any{"name": obj.GetName(), "namespace": obj.GetNamespace()}
	if l := obj.GetLabels(); len(l) > 0 {
		meta["labels"] = l
	}
	ann := map[string]string{}
	for k, v := range obj.GetAnnotations() {
		if !strings.HasPrefix(k, "kubectl.kubernetes.io/") && k != config.AnnotationOwner {
			ann[k] = v
		}
	}
	ann[config.AnnotationOwner] = Owner
	meta["annotations"] = ann
	doc := map[string]any{"apiVersion": obj.GetAPIVersion(), "kind": obj.GetKind(), "metadata": meta}
	if spec, ok := obj.Object["spec"]; ok {
		doc["spec"] = spec
	}
	b, err := json.Marshal(doc)
	if err != nil {
		// An unstructured object is JSON already.
		panic(fmt.Sprintf("kube: encode %s/%s: %v", obj.GetNamespace(), obj.GetName(), err))
	}
	return b
}

// istioResult is what an apply found, for the object's status.
type istioResult struct {
	generation int64
	problems   []string // the object was refused
	conflict   bool     // ... for a conflict with another object, not its content
	kept       bool     // ... and Sextant still serves its last accepted version
	warnings   []string // accepted, with warnings
}

// Istio's analysis message types (istio.io/api analysis/v1alpha1) the
// status uses.
var (
	msgSchema   = map[string]any{"code": "IST0106", "name": "SchemaValidationError"}
	msgConflict = map[string]any{"code": "IST0145", "name": "ConflictingResource"}
	msgRef      = map[string]any{"code": "IST0101", "name": "ReferencedResourceNotFound"}
)

// status is the object's status for res: validationMessages (istiod's
// shape: type and level, one per problem), observedGeneration, and an
// Accepted condition whose message holds every problem's text (Istio's
// CRD schema has a condition's message, and no text field in a validation
// message: the API server prunes a description).
func (res istioResult) status() map[string]any {
	var msgs []any
	typ := msgSchema
	if res.conflict {
		typ = msgConflict
	}
	for range res.problems {
		msgs = append(msgs, map[string]any{"type": typ, "level": "ERROR"})
	}
	for range res.warnings {
		msgs = append(msgs, map[string]any{"type": msgRef, "level": "WARNING"})
	}
	cond := map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted",
		"observedGeneration": res.generation, "message": "served by Sextant"}
	if len(res.warnings) > 0 {
		cond["message"] = "served by Sextant, with warnings: " + strings.Join(res.warnings, "; ")
	}
	if len(res.problems) > 0 {
		cond["status"], cond["reason"] = "False", "Invalid"
		if res.conflict {
			cond["reason"] = "Conflict"
		}
		msg := "refused by Sextant: " + strings.Join(res.problems, "; ")
		if res.kept {
			msg += " (Sextant serves the last version it accepted)"
		}
		cond["message"] = msg
	}
	st := map[string]any{"observedGeneration": res.generation, "conditions": []any{cond}, "validationMessages": nil}
	if len(msgs) > 0 {
		st["validationMessages"] = msgs
	}
	return st
}

// writeStatus patches obj's status to res's, unless it says that already.
// A failure (RBAC without the status subresource, a conflict) is logged:
// the config is served all the same.
func (s *Istio) writeStatus(ctx context.Context, obj *unstructured.Unstructured, gvr schema.GroupVersionResource, res istioResult) {
	want := res.status()
	cur, _, _ := unstructured.NestedMap(obj.Object, "status")
	if sameStatus(cur, want) {
		return
	}
	now := metav1.Now().UTC().Format(time.RFC3339)
	want["conditions"].([]any)[0].(map[string]any)["lastTransitionTime"] = now
	patch, err := json.Marshal(map[string]any{"status": want})
	if err != nil {
		panic(fmt.Sprintf("kube: encode status: %v", err))
	}
	_, err = s.dyn.Resource(gvr).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "sextant"}, "status")
	if err != nil && ctx.Err() == nil {
		s.log.Warn("writing an Istio object's status failed", "object", obj.GetKind()+"/"+obj.GetNamespace()+"/"+obj.GetName(), "err", err)
	}
}

// sameStatus reports whether cur (as the API server holds it) says what
// want does, times aside.
func sameStatus(cur, want map[string]any) bool {
	norm := func(m map[string]any) map[string]any {
		b, _ := json.Marshal(m)
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		if out == nil {
			out = map[string]any{}
		}
		if cs, ok := out["conditions"].([]any); ok {
			for _, c := range cs {
				if c, ok := c.(map[string]any); ok {
					delete(c, "lastTransitionTime")
				}
			}
		}
		if out["validationMessages"] == nil {
			delete(out, "validationMessages")
		}
		return out
	}
	return reflect.DeepEqual(norm(cur), norm(want))
}
