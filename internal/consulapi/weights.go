package consulapi

import (
	"encoding/json"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// Consul's weights and Sextant's are one scale apart: Consul's default
// is {Passing: 1, Warning: 1}, Sextant's weight 100. A Consul weight W is
// the Sextant weight 100×W (at most instance.MaxWeight), so that Consul
// services registered with and without weights balance in Consul's
// proportions, and beside instances registered through Sextant's API
// (weight 100: Consul's 1). Consul's exact weights are kept in the label
// consul-weights when the Sextant weight does not say them (a Warning
// weight other than Passing, or a Passing above MaxWeight/100).

// weightScale is the Sextant weight of Consul's weight 1.
const weightScale = instance.DefaultWeight

// sextantWeight is the instance weight of Consul's weights w (nil: not
// given, Consul's {1, 1}).
func sextantWeight(w *weights) int {
	if w == nil || w.Passing < 1 {
		return instance.DefaultWeight
	}
	return min(w.Passing, instance.MaxWeight/weightScale) * weightScale
}

// impliedWeights reports whether w is what the instance weight of w
// answers back, so that no label needs to keep it.
func impliedWeights(w weights) bool {
	return w.Warning == w.Passing && w.Passing >= 1 && w.Passing*weightScale <= instance.MaxWeight
}

// weightsOf are the Consul weights answered for in: its label's, or its
// weight over the scale (at least 1, rounded to the nearest).
func weightsOf(in *instance.Instance) weights {
	if v, ok := in.Metadata.Get(labelWeights); ok {
		var w weights
		if json.Unmarshal([]byte(v), &w) == nil && w.Passing >= 1 {
			return w
		}
	}
	p := max(1, (in.Weight+weightScale/2)/weightScale)
	return weights{Passing: p, Warning: p}
}
