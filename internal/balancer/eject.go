package balancer

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// EjectionConfig tunes outlier ejection; zero values are defaults.
type EjectionConfig struct {
	// ConsecutiveFailures ejects an endpoint after this many failed calls
	// in a row: Failed, and, unless SplitLocalOrigin, Unreachable and
	// Timeout (Envoy's consecutive_5xx). Default 5.
	ConsecutiveFailures int
	// NoConsecutiveFailures turns the ConsecutiveFailures detector off
	// (Envoy's enforcing_consecutive_5xx: 0).
	NoConsecutiveFailures bool
	// SplitLocalOrigin counts Unreachable and Timeout calls (the endpoint
	// could not be reached, or did not answer in time) apart from Failed
	// ones (it answered with an error), as Envoy's
	// split_external_local_origin_errors: the former count towards
	// ConsecutiveLocalOriginFailures only, and any answer resets them.
	SplitLocalOrigin bool
	// ConsecutiveLocalOriginFailures ejects an endpoint, with
	// SplitLocalOrigin, after this many Unreachable or Timeout calls in a
	// row (Envoy's consecutive_local_origin_failure). Default 5.
	ConsecutiveLocalOriginFailures int
	// NoLocalOriginFailures turns that detector off (Envoy's
	// enforcing_consecutive_local_origin_failure: 0).
	NoLocalOriginFailures bool
	// BaseEjection is the first ejection's length; the n-th ejection in a
	// row lasts n times as long. Default 30s.
	BaseEjection time.Duration
	// MaxEjection caps an ejection's length. Default 300s.
	MaxEjection time.Duration
	// MaxEjectedPercent caps the share of endpoints ejected at once (one
	// endpoint may always be ejected). Default 50.
	MaxEjectedPercent int
	// CountRejected also counts Rejected calls as failures. Off by default:
	// a rejection is overload, which the adaptive policy handles by routing,
	// not sickness.
	CountRejected bool
}

func (c EjectionConfig) withDefaults() EjectionConfig {
	if c.ConsecutiveFailures <= 0 {
		c.ConsecutiveFailures = 5
	}
	if c.ConsecutiveLocalOriginFailures <= 0 {
		c.ConsecutiveLocalOriginFailures = 5
	}
	if c.BaseEjection <= 0 {
		c.BaseEjection = 30 * time.Second
	}
	if c.MaxEjection <= 0 {
		c.MaxEjection = 300 * time.Second
	}
	if c.MaxEjection < c.BaseEjection {
		c.MaxEjection = c.BaseEjection
	}
	if c.MaxEjectedPercent <= 0 || c.MaxEjectedPercent > 100 {
		c.MaxEjectedPercent = 50
	}
	return c
}

// Eject wraps any policy in outlier ejection, as Envoy's consecutive-5xx
// detector: after ConsecutiveFailures failures in a row an endpoint is not
// picked for BaseEjection x (number of recent ejections), capped at
// MaxEjection; the multiplier decays by one per BaseEjection without an
// ejection. A picker over one endpoint picks it even while it is ejected.
// now is the clock (nil: time.Now). Ejection state is keyed by endpoint ID
// and survives rebuilds.
func Eject(inner Policy, cfg EjectionConfig, now func() time.Time) Policy {
	if now == nil {
		now = time.Now
	}
	return &ejectPolicy{inner: inner, cfg: cfg.withDefaults(), now: now}
}

type ejectPolicy struct {
	inner  Policy
	cfg    EjectionConfig
	now    func() time.Time
	states stateStore[ejState]
	// mu serialises ejection decisions (rare: only at the failure
	// threshold), so the ejected-percent cap is respected.
	mu sync.Mutex
	// until is the latest ejection end of any endpoint: past it, Pick skips
	// the per-endpoint checks. It lives here, not in a picker, because Done
	// may arrive through a picker that was already replaced.
	until atomic.Int64
	// ejections counts every ejection, for metrics.
	ejections atomic.Int64
}

// Ejections returns how many ejections the policy has made.
func (p *ejectPolicy) Ejections() int64 { return p.ejections.Load() }

type ejState struct {
	consecutive  atomic.Int64 // failures in a row (ConsecutiveFailures)
	local        atomic.Int64 // local-origin failures in a row, with SplitLocalOrigin
	ejectedUntil atomic.Int64 // unix nanoseconds; 0 = never ejected
	// Guarded by ejectPolicy.mu.
	multiplier int64
	lastEnd    int64 // unix nanoseconds when the last ejection ended
}

// Name implements Policy: the inner policy's name.
func (p *ejectPolicy) Name() string { return p.inner.Name() }

// Build implements Policy.
func (p *ejectPolicy) Build(eps []Endpoint) Picker {
	ep := &ejectPicker{
		p:      p,
		inner:  p.inner.Build(eps),
		states: p.states.resolve(eps, func(Endpoint) *ejState { return &ejState{} }),
	}
	return ep
}

type ejectPicker struct {
	p      *ejectPolicy
	inner  Picker
	states []*ejState
}

func (e *ejectPicker) Pick() (int, error) {
	if len(e.states) == 0 {
		return -1, ErrNoEndpoint
	}
	// A set of one is never emptied by ejection (Envoy's panic routing, at
	// 0% of the set left): a lone endpoint that refused connections while
	// it restarted takes calls as soon as it is back, not after its
	// ejection. It is still counted as ejected (Ejected, metrics).
	now := e.p.now().UnixNano()
	if now >= e.p.until.Load() || len(e.states) == 1 {
		return e.inner.Pick()
	}
	// Some endpoint is ejected: ask the inner picker again, bounded; each
	// refused pick is handed back as Canceled so its accounting is undone.
	for range 4*len(e.states) + 8 {
		i, err := e.inner.Pick()
		if err != nil {
			return i, err
		}
		if now >= e.states[i].ejectedUntil.Load() {
			return i, nil
		}
		e.inner.Done(i, 0, Canceled)
	}
	return -1, ErrNoEndpoint
}

// PickHash implements HashPicker when the inner picker maps hashes (any
// other picks as Pick does). A hash that maps to an ejected endpoint moves
// on to hashes derived from it, bounded, so that it lands where a ring
// without that endpoint would send it most of the time, and returns to its
// endpoint when the ejection ends (Envoy rebuilds the ring without it).
func (e *ejectPicker) PickHash(hash uint64) (int, error) {
	hp, ok := e.inner.(HashPicker)
	if !ok {
		return e.Pick()
	}
	if len(e.states) == 0 {
		return -1, ErrNoEndpoint
	}
	now := e.p.now().UnixNano()
	if now >= e.p.until.Load() || len(e.states) == 1 {
		return hp.PickHash(hash)
	}
	for range 4*len(e.states) + 8 {
		i, err := hp.PickHash(hash)
		if err != nil {
			return i, err
		}
		if now >= e.states[i].ejectedUntil.Load() {
			return i, nil
		}
		hash = hash*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019 // next hash (a 64-bit LCG step)
	}
	return -1, ErrNoEndpoint
}

func (e *ejectPicker) Done(idx int, latency time.Duration, outcome Outcome) {
	e.inner.Done(idx, latency, outcome)
	if idx < 0 || idx >= len(e.states) {
		return
	}
	st := e.states[idx]
	cfg := &e.p.cfg
	local := outcome == Unreachable || outcome == Timeout
	switch {
	case outcome == Canceled:
		return
	case cfg.SplitLocalOrigin && local:
		// Not an answer: only the local-origin detector counts it.
		if cfg.NoLocalOriginFailures || st.local.Add(1) < int64(cfg.ConsecutiveLocalOriginFailures) {
			return
		}
		e.eject(st)
		return
	case cfg.SplitLocalOrigin:
		st.local.Store(0) // an answer: the endpoint is reachable
	}
	switch outcome {
	case Success:
		st.consecutive.Store(0)
		return
	case Rejected:
		if !cfg.CountRejected {
			st.consecutive.Store(0)
			return
		}
	}
	if cfg.NoConsecutiveFailures || st.consecutive.Add(1) < int64(cfg.ConsecutiveFailures) {
		return
	}
	e.eject(st)
}

// Ejected implements EjectedLister.
func (p *ejectPolicy) Ejected() []string {
	now := p.now().UnixNano()
	if now >= p.until.Load() {
		return nil
	}
	var ids []string
	p.states.each(func(id string, st *ejState) {
		if st.ejectedUntil.Load() > now {
			ids = append(ids, id)
		}
	})
	slices.Sort(ids)
	return ids
}

// eject ejects st unless it is ejected already or the cap is reached.
func (e *ejectPicker) eject(st *ejState) {
	cfg := e.p.cfg
	e.p.mu.Lock()
	defer e.p.mu.Unlock()
	now := e.p.now().UnixNano()
	if st.ejectedUntil.Load() > now {
		return
	}
	ejected := 0
	for _, o := range e.states {
		if o.ejectedUntil.Load() > now {
			ejected++
		}
	}
	if ejected > 0 && (ejected+1)*100 > cfg.MaxEjectedPercent*len(e.states) {
		return // keep the call at the threshold; it ejects once room frees up
	}
	if st.lastEnd > 0 {
		healthy := (now - st.lastEnd) / int64(cfg.BaseEjection)
		st.multiplier = max(0, st.multiplier-healthy)
	}
	st.multiplier++
	d := min(time.Duration(st.multiplier)*cfg.BaseEjection, cfg.MaxEjection)
	end := now + int64(d)
	st.lastEnd = end
	st.consecutive.Store(0)
	st.local.Store(0)
	st.ejectedUntil.Store(end)
	e.p.ejections.Add(1)
	if end > e.p.until.Load() {
		e.p.until.Store(end)
	}
}

// Uneject ends id's ejection now, if it is ejected, and clears its failure
// counts; it reports whether id was ejected. Envoy's
// successful_active_health_check_uneject_host: the gateway calls it when an
// active health check of the endpoint passes. Any goroutine.
func (p *ejectPolicy) Uneject(id string) bool {
	now := p.now().UnixNano()
	if now >= p.until.Load() {
		return false // nothing is ejected
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	was := false
	p.states.each(func(i string, st *ejState) {
		if i != id || st.ejectedUntil.Load() <= now {
			return
		}
		was = true
		st.ejectedUntil.Store(now)
		st.lastEnd = now
		st.consecutive.Store(0)
		st.local.Store(0)
	})
	return was
}
