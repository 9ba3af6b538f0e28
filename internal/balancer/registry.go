package balancer

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// ErrUnknownPolicy is returned by New for a name no policy answers to.
var ErrUnknownPolicy = errors.New("balancer: unknown policy")

// Default is the policy a route uses when its configuration names none.
const Default = "adaptive"

// Option tunes a policy built by New. Options a policy does not use are
// ignored, so one option list can serve every name.
type Option func(*options)

type options struct {
	activeRequestBias float64       // least_request
	decay             time.Duration // peak_ewma
	ejection          *EjectionConfig
	ringSize          uint64 // ring_hash's minimum ring size, maglev's table size
	now               func() time.Time
}

// WithActiveRequestBias sets least_request's active_request_bias (Envoy's
// name): effective weight = weight / (active+1)^bias. Default 1.0.
func WithActiveRequestBias(bias float64) Option {
	return func(o *options) { o.activeRequestBias = bias }
}

// WithDecay sets peak_ewma's decay time (Finagle's decayTime). Default 10s.
func WithDecay(d time.Duration) Option {
	return func(o *options) { o.decay = d }
}

// WithRingSize sets ring_hash's minimum ring size or maglev's table size
// (0: Envoy's defaults).
func WithRingSize(n uint64) Option {
	return func(o *options) { o.ringSize = n }
}

// WithOutlierEjection wraps the policy in outlier ejection (see Eject).
func WithOutlierEjection(cfg EjectionConfig) Option {
	return func(o *options) { c := cfg; o.ejection = &c }
}

// WithClock injects the clock used for time-based state (ejection backoff,
// decay, adaptive windows); tests pass a fake. Default time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// monoEpoch anchors the default monotonic clock.
var monoEpoch = time.Now()

// nanos is the policies' nanosecond clock: monotonic time since monoEpoch
// (cheaper than time.Now, which also reads the wall clock), or the injected
// clock when a test set one.
func (o options) nanos() func() int64 {
	if o.now == nil {
		return func() int64 { return int64(time.Since(monoEpoch)) }
	}
	now := o.now
	return func() int64 { return now().UnixNano() }
}

var constructors = map[string]func(options) Policy{
	"round_robin":          func(options) Policy { return NewRoundRobin() },
	"weighted_round_robin": func(options) Policy { return NewWeightedRoundRobin() },
	"random":               func(options) Policy { return NewRandom() },
	"least_request":        func(o options) Policy { return NewLeastRequest(o.activeRequestBias) },
	"peak_ewma":            func(o options) Policy { return newPeakEWMA(o.decay, o.nanos()) },
	"adaptive":             func(o options) Policy { return newAdaptive(o.nanos()) },
	"ring_hash":            func(o options) Policy { return RingHash{MinRingSize: o.ringSize} },
	"maglev":               func(o options) Policy { return Maglev{TableSize: o.ringSize} },
}

// Names lists the policies New knows, sorted.
func Names() []string {
	names := make([]string, 0, len(constructors))
	for n := range constructors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New returns a fresh policy by configuration name ("" means Default).
// Each call returns independent learned state.
func New(name string, opts ...Option) (Policy, error) {
	if name == "" {
		name = Default
	}
	c, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownPolicy, name, Names())
	}
	o := options{activeRequestBias: 1, decay: 10 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	p := c(o)
	if o.ejection != nil {
		p = Eject(p, *o.ejection, o.now)
	}
	return p, nil
}

// XDSTypeURLPrefix starts the type URL that names a Sextant policy in an
// xDS Cluster's load_balancing_policy, as a TypedStruct: the control plane
// emits "sextant.io/balancer/sextant_adaptive"; the gateway reads it, and
// grpc-go looks up a balancer registered as the last path segment
// ("sextant_adaptive", from client/grpcresolver), skipping to the next
// policy in the list when none is.
const XDSTypeURLPrefix = "sextant.io/balancer/sextant_"

// XDSTypeURL is the type URL naming policy name in xDS.
func XDSTypeURL(name string) string { return XDSTypeURLPrefix + name }

// NameFromXDSTypeURL returns the policy a type URL names, if it is one of
// Sextant's.
func NameFromXDSTypeURL(u string) (string, bool) {
	name, ok := strings.CutPrefix(u, XDSTypeURLPrefix)
	return name, ok && name != ""
}
