package balancer

import (
	"math/rand/v2"
	"time"
)

// Random is the "random" policy: a uniformly random endpoint per call,
// ignoring weights and outcomes. It is the race's baseline.
type Random struct{}

var _ Policy = Random{}

// NewRandom returns a random policy.
func NewRandom() Random { return Random{} }

// Name implements Policy.
func (Random) Name() string { return "random" }

// Build implements Policy.
func (Random) Build(eps []Endpoint) Picker { return randomPicker{n: len(eps)} }

type randomPicker struct{ n int }

func (r randomPicker) Pick() (int, error) {
	if r.n == 0 {
		return -1, ErrNoEndpoint
	}
	// math/rand/v2's top-level source is per-thread and lock-free.
	return rand.IntN(r.n), nil
}

func (randomPicker) Done(int, time.Duration, Outcome) {}
