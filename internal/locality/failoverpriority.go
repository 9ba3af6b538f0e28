package locality

import "strings"

// The labels Istio reads from a workload's locality and network for
// failoverPriority (its label.LabelTopology* constants).
const (
	LabelNetwork = "topology.istio.io/network"
	LabelRegion  = "topology.kubernetes.io/region"
	LabelZone    = "topology.kubernetes.io/zone"
	LabelSubZone = "topology.istio.io/subzone"
)

// Topology returns l's value for a topology label (region, zone or
// subzone), ok false for any other key.
func Topology(l Locality, key string) (string, bool) {
	switch key {
	case LabelRegion:
		return l.Region, true
	case LabelZone:
		return l.Zone, true
	case LabelSubZone:
		return l.SubZone, true
	}
	return "", false
}

// FailoverPriority is the priority Istio's applyFailoverPriorityPerLocality
// gives an endpoint for a `failoverPriority` list: 0 when the endpoint's
// value of every listed label equals the client's, else len(keys) - j for
// the first label j that differs (so the more leading labels match, the
// better). An entry "key=value" compares the endpoint's key with value
// instead of the client's. client and endpoint return a label's value
// ("" when absent).
func FailoverPriority(keys []string, client, endpoint func(key string) string) uint32 {
	for j, k := range keys {
		want, fixed := "", false
		if i := strings.IndexByte(k, '='); i >= 0 {
			k, want, fixed = k[:i], k[i+1:], true
		}
		if !fixed {
			want = client(k)
		}
		if endpoint(k) != want {
			return uint32(len(keys) - j)
		}
	}
	return 0
}
