package balancer

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

// oraclePolicy is the bench-only "oracle": the adaptive policy's routing rule
// fed with each provider's true current capacity instead of estimates. It
// bounds what any gateway-side policy can reach on this machine.
type oraclePolicy struct {
	providers []*simProvider
}

func (o *oraclePolicy) Name() string { return "oracle" }

func (o *oraclePolicy) Build(eps []balancer.Endpoint) balancer.Picker {
	return &oraclePicker{providers: o.providers, inflight: make([]atomic.Int64, len(o.providers))}
}

type oraclePicker struct {
	providers []*simProvider
	inflight  []atomic.Int64
}

// Pick sends the call where its expected queueing is least, never beyond a
// provider's threads (shed instead).
func (o *oraclePicker) Pick() (int, error) {
	n := len(o.providers)
	best, bestScore := -1, math.Inf(1)
	off := rand.IntN(n)
	for k := range n {
		i := (off + k) % n
		p := o.providers[i]
		in := o.inflight[i].Load()
		if in >= p.threads {
			continue
		}
		c := p.current()
		lim := float64(c.MaxConcurrent)
		s := (float64(in) + 1 - lim) * meanServiceMs(c.AvgRTTMs) / lim
		if s < bestScore {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return -1, balancer.ErrShed
	}
	o.inflight[best].Add(1)
	return best, nil
}

func (o *oraclePicker) Done(idx int, _ time.Duration, _ balancer.Outcome) {
	o.inflight[idx].Add(-1)
}
