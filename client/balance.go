package client

import (
	"fmt"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

// Balancer policy names, for ViewOptions.Policy and PickOptions.Policy.
const (
	// PolicyAdaptive (the default) estimates each instance's concurrency
	// limit from in-flight counts and latency, never mistakes a fast
	// rejection for speed, and sheds at the caller (ErrShed) when every
	// instance is full.
	PolicyAdaptive = "adaptive"
	// PolicyRoundRobin takes instances in turn.
	PolicyRoundRobin = "round_robin"
	// PolicyWeightedRoundRobin takes instances in turn by weight.
	PolicyWeightedRoundRobin = "weighted_round_robin"
	// PolicyRandom picks uniformly.
	PolicyRandom = "random"
	// PolicyLeastRequest picks the fewer in-flight calls of two (weighted).
	PolicyLeastRequest = "least_request"
	// PolicyPeakEWMA picks the lower peak-sensitive latency average times
	// in-flight calls of two (Finagle's).
	PolicyPeakEWMA = "peak_ewma"
)

// Fallback is what a pick does when the subset its Match names has no
// instance, with Envoy's names.
type Fallback string

// Fallback policies (Envoy's LbSubsetConfig).
const (
	// FallbackUnset: a selector defers to the service's policy; the
	// service's unset policy is FallbackNone.
	FallbackUnset Fallback = ""
	// FallbackNone fails the pick with ErrNoSubset.
	FallbackNone Fallback = "NO_FALLBACK"
	// FallbackAny picks among every instance of the service.
	FallbackAny Fallback = "ANY_ENDPOINT"
	// FallbackDefaultSubset picks among the instances matching
	// SubsetConfig.DefaultSubset.
	FallbackDefaultSubset Fallback = "DEFAULT_SUBSET"
	// FallbackKeysSubset (selectors only) retries with the match restricted
	// to SubsetSelector.FallbackKeysSubset.
	FallbackKeysSubset Fallback = "KEYS_SUBSET"
)

// SubsetConfig groups a service's instances by metadata keys so that a pick
// naming values of those keys (PickOptions.Match) goes to the instances
// that have them. JSON names follow Envoy's LbSubsetConfig; the rules are
// docs/subset.md's. The zero value has no subsets: every Match fails with
// ErrNoSubset (picks without a Match are unaffected).
type SubsetConfig struct {
	// FallbackPolicy applies when no selector's subset or fallback
	// answers: FallbackNone (default), FallbackAny or FallbackDefaultSubset.
	FallbackPolicy Fallback `json:"fallback_policy,omitempty"`
	// DefaultSubset is the metadata an instance must all have to be in the
	// default subset; empty means every instance.
	DefaultSubset map[string]string `json:"default_subset,omitempty"`
	// Selectors are the key sets a Match may name, exactly.
	Selectors []SubsetSelector `json:"subset_selectors,omitempty"`
	// PanicModeAny: when the chosen subset has no healthy instance, pick
	// among all healthy instances instead of failing.
	PanicModeAny bool `json:"panic_mode_any,omitempty"`
}

// SubsetSelector is one set of metadata keys a Match may name.
type SubsetSelector struct {
	Keys []string `json:"keys"`
	// FallbackPolicy for a Match naming exactly Keys whose subset has no
	// instance; unset defers to SubsetConfig.FallbackPolicy.
	FallbackPolicy Fallback `json:"fallback_policy,omitempty"`
	// FallbackKeysSubset: with FallbackKeysSubset, the strict subset of
	// Keys the match is restricted to before trying again.
	FallbackKeysSubset []string `json:"fallback_keys_subset,omitempty"`
	// SingleHostPerSubset: each subset is one instance (one key only).
	SingleHostPerSubset bool `json:"single_host_per_subset,omitempty"`
}

// OutlierEjection takes an instance out of picks after consecutive
// failures, as Envoy's consecutive-5xx detector; zero fields are defaults.
type OutlierEjection struct {
	// ConsecutiveFailures (default 5) failed or timed-out calls in a row
	// eject an instance.
	ConsecutiveFailures int
	// BaseEjection (default 30s) is the first ejection's length; the n-th
	// in a row lasts n times as long, up to MaxEjection (default 300s).
	BaseEjection, MaxEjection time.Duration
	// MaxEjectedPercent (default 50) caps the share ejected at once.
	MaxEjectedPercent int
	// CountRejected also counts rejections (overload) as failures.
	CountRejected bool
}

// newPolicy builds a fresh policy (its own learned state) by name.
func newPolicy(name string, ej *OutlierEjection) (balancer.Policy, error) {
	var opts []balancer.Option
	if ej != nil {
		opts = append(opts, balancer.WithOutlierEjection(balancer.EjectionConfig{
			ConsecutiveFailures: ej.ConsecutiveFailures,
			BaseEjection:        ej.BaseEjection,
			MaxEjection:         ej.MaxEjection,
			MaxEjectedPercent:   ej.MaxEjectedPercent,
			CountRejected:       ej.CountRejected,
		}))
	}
	p, err := balancer.New(name, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: %w: %w", ErrInvalidPick, err)
	}
	return p, nil
}

// Outcome is how a picked call ended, reported with Picked.Report so that
// the adaptive policies and outlier ejection learn.
type Outcome uint8

// Outcomes; Picked.Done derives one from an error.
const (
	// OutcomeSuccess: the instance answered.
	OutcomeSuccess Outcome = iota
	// OutcomeRejected: the instance refused at once (overloaded: HTTP 429
	// or 503, gRPC RESOURCE_EXHAUSTED); never taken as a sign of speed.
	OutcomeRejected
	// OutcomeTimeout: no answer in time.
	OutcomeTimeout
	// OutcomeFailed: any other failure (connection refused, 5xx, ...).
	OutcomeFailed
	// OutcomeCanceled: the call was not made or was abandoned by the
	// caller; only releases in-flight accounting.
	OutcomeCanceled
)

// String names the outcome.
func (o Outcome) String() string { return balancer.Outcome(o).String() }
