package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/subset"
)

// ViewOptions configure a View. The zero value watches services of the
// "default" namespace and picks with the adaptive policy.
type ViewOptions struct {
	// Namespace of service names given without one ("orders" rather than
	// "prod/orders"); default "default".
	Namespace string
	// Policy picks inside the chosen instances: PolicyAdaptive (default),
	// PolicyRoundRobin, PolicyWeightedRoundRobin, PolicyRandom,
	// PolicyLeastRequest or PolicyPeakEWMA. PickOptions.Policy overrides it
	// per pick.
	Policy string
	// OutlierEjection, if set, wraps every policy in outlier ejection.
	OutlierEjection *OutlierEjection
	// Subsets is the subset configuration of every service, unless
	// ServiceSubsets names the service ("ns/name", or "name" in Namespace).
	Subsets        SubsetConfig
	ServiceSubsets map[string]SubsetConfig
	// Wait is how long the server holds each blocking query (default 1m,
	// at most MaxWait).
	Wait time.Duration
	// OnError hears transient watch errors (the server unreachable or
	// restarting); the view keeps its last state and retries with backoff.
	// It runs on a watch goroutine and must not block.
	OnError func(service string, err error)
}

// View is a watched, always current copy of some services' instances in the
// process, with a subset load balancer and a balancer policy over each, so
// that Pick answers without a request. Each added service is followed by one
// goroutine with blocking queries, which survives server restarts: it retries
// with backoff and resumes from the last revision it saw. Close stops them.
//
// Pick and the read methods may be called from any goroutine.
type View struct {
	c    *Client
	opts ViewOptions
	ns   string
	cfgs map[string]subset.Config // by "ns/name"; validated
	def  subset.Config

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu serializes Add and Close; Pick reads services lock-free.
	mu       sync.Mutex
	closed   bool
	services atomic.Pointer[map[string]*service] // by "ns/name" and, in ns, by name
}

// NewView returns a View of no services yet; Add services to it. It checks
// the options (policy name, subset configurations) and starts nothing.
func (c *Client) NewView(opts ViewOptions) (*View, error) {
	v := &View{c: c, opts: opts, ns: opts.Namespace, cfgs: map[string]subset.Config{}}
	if v.ns == "" {
		v.ns = DefaultNamespace
	}
	if v.opts.Policy == "" {
		v.opts.Policy = PolicyAdaptive
	}
	if _, err := newPolicy(v.opts.Policy, opts.OutlierEjection); err != nil {
		return nil, fmt.Errorf("client: view: policy: %w", err)
	}
	var err error
	if v.def, err = subsetConfig(opts.Subsets); err != nil {
		return nil, fmt.Errorf("client: view: subsets: %w", err)
	}
	for name, sc := range opts.ServiceSubsets {
		key, _, _, err := v.key(name)
		if err != nil {
			return nil, fmt.Errorf("client: view: service_subsets[%q]: %w", name, err)
		}
		if v.cfgs[key], err = subsetConfig(sc); err != nil {
			return nil, fmt.Errorf("client: view: service_subsets[%q]: %w", name, err)
		}
	}
	v.ctx, v.cancel = context.WithCancel(context.Background())
	empty := map[string]*service{}
	v.services.Store(&empty)
	return v, nil
}

// key splits "ns/name" or "name" and returns the canonical "ns/name".
func (v *View) key(service string) (key, ns, name string, err error) {
	ns, name, err = ParseService(service, v.ns)
	if err != nil {
		return "", "", "", fmt.Errorf("%w: %w", ErrInvalidPick, err)
	}
	return ns + "/" + name, ns, name, nil
}

// Add starts watching services ("name" in the view's namespace, or
// "namespace/name") and waits until each has its first state, ctx ends, or
// the server rejects a name (then that service is dropped and the error
// returned). Adding a service twice is harmless; Add is how a caller waits
// for a service another goroutine added.
func (v *View) Add(ctx context.Context, services ...string) error {
	var wait []*service
	for _, name := range services {
		s, err := v.add(name)
		if err != nil {
			return err
		}
		wait = append(wait, s)
	}
	for _, s := range wait {
		select {
		case <-s.ready:
			if err := s.failure(); err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("client: view: waiting for %s: %w", s.key, ctx.Err())
		case <-v.ctx.Done():
			return ErrViewClosed
		}
	}
	return nil
}

func (v *View) add(name string) (*service, error) {
	if s := (*v.services.Load())[name]; s != nil {
		return s, nil
	}
	key, ns, svcName, err := v.key(name)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, ErrViewClosed
	}
	old := *v.services.Load()
	if s := old[key]; s != nil {
		return s, nil
	}
	cfg, ok := v.cfgs[key]
	if !ok {
		cfg = v.def
	}
	s, err := newService(v, key, cfg)
	if err != nil {
		return nil, err
	}
	next := make(map[string]*service, len(old)+2)
	for k, x := range old {
		next[k] = x
	}
	next[key] = s
	if ns == v.ns {
		next[svcName] = s
	}
	v.services.Store(&next)
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		s.watch(v.ctx, ns, svcName)
	}()
	return s, nil
}

// Close stops every watch and waits for the goroutines. Picks after Close
// still answer from the last state.
func (v *View) Close() error {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.cancel()
	v.wg.Wait()
	return nil
}

// ServiceState is one service as the view holds it.
type ServiceState struct {
	// Revision is the service's revision (0: unknown to the server).
	Revision uint64
	// Instances, sorted by id, healthy or not. Shared with the view: do
	// not modify them (metadata maps included).
	Instances []Instance
}

// State returns the current state of an added service, or ErrUnknownService.
func (v *View) State(service string) (ServiceState, error) {
	s := (*v.services.Load())[service]
	if s == nil {
		return ServiceState{}, ErrUnknownService
	}
	st := s.state.Load()
	if st == nil {
		return ServiceState{}, nil
	}
	return ServiceState{Revision: st.revision, Instances: st.instances}, nil
}

// Subscribe calls fn after each new state of an added service is applied
// (so State and Pick already see it), on the service's watch goroutine: fn
// must not block. If the service has a state already, fn is called once
// at once, on the caller's goroutine. The returned function unsubscribes.
func (v *View) Subscribe(service string, fn func()) (unsubscribe func(), err error) {
	s := (*v.services.Load())[service]
	if s == nil {
		return nil, ErrUnknownService
	}
	s.mu.Lock()
	s.subID++
	id := s.subID
	s.subs[id] = fn
	hasState := s.state.Load() != nil
	s.mu.Unlock()
	if hasState {
		fn()
	}
	return func() {
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
	}, nil
}

// service is one watched service.
type service struct {
	v     *View
	key   string
	cfg   subset.Config
	ready chan struct{} // closed at the first state or a permanent error
	err   atomic.Pointer[error]

	state atomic.Pointer[serviceState]

	// def is the default variant (the view's policy and fallback), read
	// by every pick; variants holds the others.
	def      *variant
	variants atomic.Pointer[[]*variant]

	// mu guards the writer side: hosts, subs, and the creation of variants
	// (which must see every update). Held by the watch goroutine while it
	// applies a state, and by a pick building a variant (cold path).
	mu    sync.Mutex
	hosts map[string]*host
	subs  map[int]func()
	subID int
}

// serviceState is one immutable state; gen counts states.
type serviceState struct {
	gen       uint64
	revision  uint64
	instances []Instance
	byID      map[string]*host
}

func newService(v *View, key string, cfg subset.Config) (*service, error) {
	s := &service{v: v, key: key, cfg: cfg, ready: make(chan struct{}), hosts: map[string]*host{}, subs: map[int]func(){}}
	def, err := s.newVariant(v.opts.Policy, FallbackUnset)
	if err != nil {
		return nil, err
	}
	s.def = def
	none := []*variant{}
	s.variants.Store(&none)
	return s, nil
}

func (s *service) failure() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// watch follows the service until ctx ends or the server rejects the query.
func (s *service) watch(ctx context.Context, ns, name string) {
	wait := s.v.opts.Wait
	if wait <= 0 {
		wait = time.Minute
	}
	opts := WatchOptions{Wait: wait}
	if s.v.opts.OnError != nil {
		opts.OnError = func(err error) { s.v.opts.OnError(s.key, err) }
	}
	err := s.v.c.WatchFunc(ctx, ns, name, opts, func(res QueryResult) error {
		s.apply(res)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("client: view: %s: %w", s.key, err)
		s.err.Store(&err)
		s.v.drop(s)
	}
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// drop forgets a service whose watch failed for good, so a later Add
// tries again.
func (v *View) drop(s *service) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old := *v.services.Load()
	next := make(map[string]*service, len(old))
	for k, x := range old {
		if x != s {
			next[k] = x
		}
	}
	v.services.Store(&next)
}

// apply turns a new state into host changes for every variant, then
// publishes it and tells the subscribers. Watch goroutine only.
func (s *service) apply(res QueryResult) {
	s.mu.Lock()
	prev := s.state.Load()
	st := &serviceState{revision: res.Revision, instances: res.Instances, byID: make(map[string]*host, len(res.Instances))}
	if prev != nil {
		st.gen = prev.gen + 1
	}
	var upserts []*host
	for i := range res.Instances {
		in := &res.Instances[i]
		h := s.hosts[in.ID]
		if h == nil || !sameInstance(h.inst, in) {
			h = newHost(in)
			upserts = append(upserts, h)
		}
		st.byID[in.ID] = h
	}
	var removed []string
	for id := range s.hosts {
		if _, ok := st.byID[id]; !ok {
			removed = append(removed, id)
		}
	}
	s.hosts = st.byID
	s.def.lb.update(upserts, removed)
	for _, va := range *s.variants.Load() {
		va.lb.update(upserts, removed)
	}
	s.state.Store(st)
	subs := make([]func(), 0, len(s.subs))
	for _, fn := range s.subs {
		subs = append(subs, fn)
	}
	s.mu.Unlock()
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
	for _, fn := range subs {
		fn()
	}
}

// sameInstance reports whether b changes nothing a pick depends on: the
// server gives every change a new revision, health included.
func sameInstance(a, b *Instance) bool {
	return a.Revision == b.Revision && a.Revision != 0 && a.Healthy == b.Healthy && a.Isolated == b.Isolated
}

// pickable: healthy and not isolated.
func pickable(in *Instance) bool { return in.Healthy && !in.Isolated }
