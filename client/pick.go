package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
)

// Errors of Pick, returned as they are (not wrapped: a pick allocates
// nothing), to compare with errors.Is.
var (
	// ErrNoInstance: the chosen instances have no healthy, non-isolated
	// member the policy may pick (all weights 0, all ejected).
	ErrNoInstance = errors.New("client: pick: no healthy instance")
	// ErrNoSubset: the Match names no subset and no fallback applies.
	ErrNoSubset = errors.New("client: pick: no subset for the match and no fallback")
	// ErrShed: the adaptive policy estimates every instance full; fail
	// fast rather than add to the queue.
	ErrShed = errors.New("client: pick: shed, every instance is at capacity")
	// ErrUnknownService: the service was not added to the view.
	ErrUnknownService = errors.New("client: view: service not added")
	// ErrViewClosed: Add after Close.
	ErrViewClosed = errors.New("client: view closed")
	// ErrInvalidPick wraps bad pick options: a selector that does not
	// parse, an unknown policy or fallback, a bad service name.
	ErrInvalidPick = errors.New("client: invalid pick options")
	// ErrRejected marks an error as the instance refusing the call at once
	// (overload): Picked.Done reports it as OutcomeRejected. Wrap it
	// (fmt.Errorf("...: %w", client.ErrRejected)) when your protocol says so.
	ErrRejected = errors.New("client: rejected by the instance")
)

// PickOptions choose among a service's instances.
type PickOptions struct {
	// Match names a subset: metadata key -> value, exactly one of
	// SubsetConfig's selectors' key sets (docs/subset.md). Empty (and no
	// Selector): every healthy instance.
	Match map[string]string
	// Selector filters instances with a Kubernetes-style selector over
	// metadata ("version=v2,zone in (z1,z2)"). Exclusive with Match. Each
	// distinct selector's picker is built once per state of the service
	// and kept: use a few fixed selectors, not one per request.
	Selector string
	// Policy overrides the view's balancer policy for this pick (its own
	// learned state, kept per policy).
	Policy string
	// Fallback overrides the service's cluster-wide fallback policy
	// (FallbackNone, FallbackAny or FallbackDefaultSubset).
	Fallback Fallback
}

// Picked is a picked instance. Report the call's outcome exactly once,
// with Done or Report, so that the policy learns and its in-flight count
// is released.
type Picked struct {
	// Instance is shared with the view: read it, do not modify it.
	Instance *Instance
	addr     string

	res    subsetResult    // picked by the subset balancer, or
	picker balancer.Picker // by a selector's picker, at idx
	idx    int
}

// Addr is the instance's host:port.
func (p Picked) Addr() string { return p.addr }

// Report tells the policy how the call went. Any goroutine; never blocks.
func (p Picked) Report(latency time.Duration, o Outcome) {
	if p.picker != nil {
		p.picker.Done(p.idx, latency, balancer.Outcome(o))
		return
	}
	doneSubset(p.res, latency, o)
}

// Done reports the call's outcome from its error: nil is a success,
// ErrRejected a rejection, a deadline or network timeout a timeout,
// context.Canceled a canceled call, anything else a failure.
func (p Picked) Done(latency time.Duration, err error) { p.Report(latency, OutcomeOf(err)) }

// OutcomeOf classifies a call's error as Done does.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return OutcomeSuccess
	}
	if errors.Is(err, ErrRejected) {
		return OutcomeRejected
	}
	if errors.Is(err, context.Canceled) {
		return OutcomeCanceled
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return OutcomeTimeout
	}
	return OutcomeFailed
}

// Pick chooses one instance of an added service ("name" or "ns/name"). It
// reads the view's current state without a request or a lock and, on the
// hot path (a Match, or a selector whose picker is built), allocates nothing.
// Any goroutine, concurrently.
func (v *View) Pick(service string, opts PickOptions) (Picked, error) {
	s := (*v.services.Load())[service]
	if s == nil {
		return Picked{}, ErrUnknownService
	}
	va := s.def
	if opts.Policy != "" || opts.Fallback != FallbackUnset {
		var err error
		if va, err = s.variant(opts.Policy, opts.Fallback); err != nil {
			return Picked{}, err
		}
	}
	if len(opts.Match) > 0 {
		if opts.Selector != "" {
			return Picked{}, errMatchAndSelector
		}
		in, addr, r, err := va.lb.pick(opts.Match)
		if err != nil {
			return Picked{}, err
		}
		return Picked{Instance: in, addr: addr, res: r}, nil
	}
	return va.pickSelector(s, opts.Selector)
}

// Prepared is a pick resolved once, for a hot path that picks with the same
// options again and again (a gRPC balancer, an HTTP transport): the service,
// the policy variant, and the match's keys or the selector's entry are found
// once, so each Pick does only the balancing. It follows the view's states
// like View.Pick and is safe for concurrent use.
type Prepared struct {
	s     *service
	va    *variant
	match bool
	req   subsetRequest
	sel   *selEntry
}

// Prepare resolves opts for service; its errors are those Pick would give
// for the options (an unknown service, a bad selector, policy or fallback).
func (v *View) Prepare(service string, opts PickOptions) (*Prepared, error) {
	s := (*v.services.Load())[service]
	if s == nil {
		return nil, ErrUnknownService
	}
	va, err := s.variant(opts.Policy, opts.Fallback)
	if err != nil {
		return nil, err
	}
	p := &Prepared{s: s, va: va}
	if len(opts.Match) > 0 {
		if opts.Selector != "" {
			return nil, errMatchAndSelector
		}
		p.match = true
		p.req = va.lb.prepare(opts.Match)
		return p, nil
	}
	if p.sel = va.addSelector(s, opts.Selector); p.sel.err != nil {
		return nil, p.sel.err
	}
	return p, nil
}

// Pick picks as View.Pick with the prepared options. Any goroutine.
func (p *Prepared) Pick() (Picked, error) {
	if p.match {
		in, addr, r, err := p.va.lb.pickRequest(&p.req)
		if err != nil {
			return Picked{}, err
		}
		return Picked{Instance: in, addr: addr, res: r}, nil
	}
	return p.sel.pick(p.s)
}

var errMatchAndSelector = fmt.Errorf("%w: Match and Selector are exclusive", ErrInvalidPick)

// maxVariants bounds the policy/fallback combinations kept per service, and
// maxSelectors the selectors kept per variant.
const (
	maxVariants  = 16
	maxSelectors = 64
)

// variant is one (policy, fallback) of a service: a subset balancer and the
// selectors' pickers, with learned state of their own.
type variant struct {
	policy   string
	fallback Fallback
	lb       subsetLB

	selMu sync.Mutex // serializes adding to sels
	sels  atomic.Pointer[map[string]*selEntry]
}

// newVariant builds a variant over the current hosts. Called with s.mu
// held (or before the service is shared).
func (s *service) newVariant(policy string, fb Fallback) (*variant, error) {
	if policy == "" {
		policy = s.v.opts.Policy
	}
	p, err := newPolicy(policy, s.v.opts.OutlierEjection)
	if err != nil {
		return nil, err
	}
	cfg := s.cfg
	if fb != FallbackUnset {
		cfg = withFallback(cfg, fb)
	}
	lb, err := newSubsetLB(cfg, p)
	if err != nil {
		return nil, fmt.Errorf("client: %w: %w", ErrInvalidPick, err)
	}
	va := &variant{policy: policy, fallback: fb, lb: lb}
	empty := map[string]*selEntry{}
	va.sels.Store(&empty)
	if len(s.hosts) > 0 {
		all := make([]*host, 0, len(s.hosts))
		for _, h := range s.hosts {
			all = append(all, h)
		}
		lb.update(all, nil)
	}
	return va, nil
}

// variant returns the variant of (policy, fb), building it on first use.
func (s *service) variant(policy string, fb Fallback) (*variant, error) {
	if policy == "" {
		policy = s.v.opts.Policy
	}
	if policy == s.def.policy && fb == s.def.fallback {
		return s.def, nil
	}
	for _, va := range *s.variants.Load() {
		if va.policy == policy && va.fallback == fb {
			return va, nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.variants.Load()
	for _, va := range old {
		if va.policy == policy && va.fallback == fb {
			return va, nil
		}
	}
	if len(old) >= maxVariants {
		return nil, fmt.Errorf("%w: more than %d policy/fallback combinations for %s", ErrInvalidPick, maxVariants, s.key)
	}
	va, err := s.newVariant(policy, fb)
	if err != nil {
		return nil, err
	}
	next := append(old[:len(old):len(old)], va)
	s.variants.Store(&next)
	return va, nil
}

// selEntry is one selector's picker, rebuilt on the first pick after each
// state change, with a policy (learned state) of its own.
type selEntry struct {
	sel    label.Selector
	err    error // the selector does not parse
	policy balancer.Policy
	mu     sync.Mutex // serializes builds (Policy.Build is one call at a time)
	cur    atomic.Pointer[selPicker]
}

type selPicker struct {
	gen    uint64
	picker balancer.Picker // nil: no instance
	hosts  []*host
}

func (va *variant) pickSelector(s *service, selector string) (Picked, error) {
	e := (*va.sels.Load())[selector]
	if e == nil {
		e = va.addSelector(s, selector)
	}
	if e.err != nil {
		return Picked{}, e.err
	}
	return e.pick(s)
}

func (e *selEntry) pick(s *service) (Picked, error) {
	st := s.state.Load()
	if st == nil {
		return Picked{}, ErrNoInstance
	}
	p := e.cur.Load()
	if p == nil || p.gen != st.gen {
		p = e.build(st)
	}
	if p.picker == nil {
		return Picked{}, ErrNoInstance
	}
	i, err := p.picker.Pick()
	if err != nil {
		return Picked{}, pickerError(err)
	}
	h := p.hosts[i]
	return Picked{Instance: h.inst, addr: h.h.Addr, picker: p.picker, idx: i}, nil
}

func pickerError(err error) error {
	switch {
	case errors.Is(err, balancer.ErrNoEndpoint):
		return ErrNoInstance
	case errors.Is(err, balancer.ErrShed):
		return ErrShed
	}
	return err
}

func (va *variant) addSelector(s *service, selector string) *selEntry {
	va.selMu.Lock()
	defer va.selMu.Unlock()
	old := *va.sels.Load()
	if e := old[selector]; e != nil {
		return e
	}
	e := &selEntry{}
	if e.sel, e.err = label.Parse(selector); e.err != nil {
		e.err = fmt.Errorf("%w: selector %q: %w", ErrInvalidPick, selector, e.err)
	} else {
		e.policy, e.err = newPolicy(va.policy, s.v.opts.OutlierEjection)
	}
	next := make(map[string]*selEntry, len(old)+1)
	if len(old) < maxSelectors {
		for k, x := range old {
			next[k] = x
		}
	}
	next[selector] = e
	va.sels.Store(&next)
	return e
}

// build makes the selector's picker for state st (cold path).
func (e *selEntry) build(st *serviceState) *selPicker {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.cur.Load(); p != nil && p.gen >= st.gen {
		return p
	}
	p := &selPicker{gen: st.gen}
	var eps []balancer.Endpoint
	for i := range st.instances {
		in := &st.instances[i]
		if !pickable(in) || !e.sel.Matches(in.Labels()) {
			continue
		}
		h := st.byID[in.ID]
		eps = append(eps, balancer.Endpoint{ID: in.ID, Addr: h.h.Addr, Weight: h.h.Weight})
		p.hosts = append(p.hosts, h)
	}
	if len(eps) > 0 {
		p.picker = e.policy.Build(eps)
	}
	e.cur.Store(p)
	return p
}
