package balancer

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// RoundRobin is the "round_robin" policy: endpoints in turn, ignoring
// weights and outcomes. Use it for equal endpoints and as a baseline.
type RoundRobin struct {
	// next is shared by every picker the policy builds, so a rebuild keeps
	// the rotation going instead of restarting every gateway at index 0.
	next atomic.Uint64
}

var _ Policy = (*RoundRobin)(nil)

// NewRoundRobin returns a round_robin policy starting at a random offset, so
// that many gateways do not all hit the same endpoint first.
func NewRoundRobin() *RoundRobin {
	p := &RoundRobin{}
	p.next.Store(rand.Uint64())
	return p
}

// Name implements Policy.
func (*RoundRobin) Name() string { return "round_robin" }

// Build implements Policy.
func (p *RoundRobin) Build(eps []Endpoint) Picker {
	return &rrPicker{next: &p.next, n: uint64(len(eps))}
}

type rrPicker struct {
	next *atomic.Uint64
	n    uint64
}

func (r *rrPicker) Pick() (int, error) {
	if r.n == 0 {
		return -1, ErrNoEndpoint
	}
	return int(r.next.Add(1) % r.n), nil
}

func (*rrPicker) Done(int, time.Duration, Outcome) {}
