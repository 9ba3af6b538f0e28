// Package balancer owns Sextant's load-balancing policies: how one call is
// sent to one of a set of endpoints, and what is learned from its outcome.
// The gateway and the subset load balancer (internal/subset, as its child
// policy) both pick through this package. It does not own endpoint discovery,
// health checking or subsets.
package balancer

import (
	"errors"
	"time"
)

// Endpoint is one destination a picker may choose.
type Endpoint struct {
	// ID is the endpoint's stable identity (the registry's instance id).
	// Learned state is keyed by it and survives a rebuild of the set.
	ID string
	// Addr is where calls go, host:port.
	Addr string
	// Weight is the relative share for weighted policies; 0 is never picked
	// by them.
	Weight uint32
}

// Outcome is how a picked call ended.
type Outcome uint8

const (
	// Success: the endpoint answered the call.
	Success Outcome = iota
	// Rejected: the endpoint refused at once (overloaded); never a sign of speed.
	Rejected
	// Timeout: no answer in time.
	Timeout
	// Failed: the endpoint answered with an error (a 5xx), or any other
	// failure not told apart.
	Failed
	// Canceled: the call was never sent (picked, then dropped by the caller
	// or by a wrapping policy such as outlier ejection). It only releases
	// the picker's in-flight accounting; nothing is learned from it.
	Canceled
	// Unreachable: no answer came back because the endpoint could not be
	// reached: the connection was refused, not made in time, or broke
	// before an answer. Envoy calls these locally originated errors;
	// outlier ejection can count them apart from Failed
	// (EjectionConfig.SplitLocalOrigin). Policies treat it as Failed.
	Unreachable
)

// String names the outcome, for logs and metrics.
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Rejected:
		return "rejected"
	case Timeout:
		return "timeout"
	case Failed:
		return "failed"
	case Canceled:
		return "canceled"
	case Unreachable:
		return "unreachable"
	}
	return "unknown"
}

var (
	// ErrNoEndpoint is returned by Pick when the snapshot has no endpoint it
	// may choose (empty, all weights 0, all ejected).
	ErrNoEndpoint = errors.New("balancer: no endpoint available")
	// ErrShed is returned by Pick when the policy sheds the call because
	// every endpoint is estimated to be full: fail fast at the caller.
	ErrShed = errors.New("balancer: shed, every endpoint is at capacity")
)

// Picker is an immutable snapshot of an endpoint set with a policy's view of
// it. Pickers are swapped atomically by their owner when the set changes.
type Picker interface {
	// Pick chooses an endpoint and returns its index in the slice the picker
	// was built from. Called from any goroutine, concurrently; it never blocks,
	// takes no lock and allocates nothing. Errors: ErrNoEndpoint, ErrShed.
	Pick() (int, error)
	// Done reports how a call picked as idx ended. The caller must call it
	// exactly once per successful Pick, from any goroutine, even after the
	// picker was replaced. It never blocks.
	Done(idx int, latency time.Duration, outcome Outcome)
}

// Policy builds pickers and keeps the learned per-endpoint state (latency,
// in-flight counts, limits) that outlives any one picker.
type Policy interface {
	// Name is the policy's configuration name, e.g. "round_robin".
	Name() string
	// Build returns a picker over endpoints. The caller keeps the slice
	// unchanged afterwards. Called by the owner of the endpoint set, one
	// call at a time; it may allocate.
	Build(endpoints []Endpoint) Picker
}

// Retainer is implemented by policies that learn per-endpoint state. By
// default Build forgets the state of endpoints not in the set it is given;
// a subset balancer builds one picker per subset from one policy, so it
// calls Retain with every endpoint of the cluster instead: from then on the
// state of exactly those endpoints is kept (and shared by every subset's
// picker) whatever sets Build is given. Called by the owner of the endpoint
// set when the set changes; safe concurrently with Build.
type Retainer interface {
	Retain(ids []string)
}

var (
	_ Retainer = (*adaptive)(nil)
	_ Retainer = (*LeastRequest)(nil)
	_ Retainer = (*peakEWMA)(nil)
	_ Retainer = (*ejectPolicy)(nil)
)

// Retain implements Retainer.
func (p *adaptive) Retain(ids []string) { p.states.retain(ids) }

// Retain implements Retainer.
func (p *LeastRequest) Retain(ids []string) { p.states.retain(ids) }

// Retain implements Retainer.
func (p *peakEWMA) Retain(ids []string) { p.states.retain(ids) }

// Retain implements Retainer: its own ejection state and the inner policy's.
func (p *ejectPolicy) Retain(ids []string) {
	p.states.retain(ids)
	if r, ok := p.inner.(Retainer); ok {
		r.Retain(ids)
	}
}

// EjectionCounter is implemented by outlier ejection (Eject,
// WithOutlierEjection): how many ejections it made, for metrics. Any
// goroutine.
type EjectionCounter interface {
	Ejections() int64
}

var _ EjectionCounter = (*ejectPolicy)(nil)

// EjectedLister is implemented by outlier ejection: the IDs of the
// endpoints ejected now, for admin views. Any goroutine; it takes the
// policy's state lock, so call it at scrape time, not per call.
type EjectedLister interface {
	Ejected() []string
}

var _ EjectedLister = (*ejectPolicy)(nil)
