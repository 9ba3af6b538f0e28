package ingress

import "github.com/sextant-mesh/sextant/internal/config"

// withDelegates returns vss with each root VirtualService's delegate
// routes replaced by its delegates' routes, merged as Istio merges them
// for a gateway's RDS (config.MergeDelegates); vss itself when no
// VirtualService delegates.
func withDelegates(vss []*config.Entry) []*config.Entry {
	var byKey map[config.Key]*config.Object
	get := func(k config.Key) *config.Object {
		if byKey == nil {
			byKey = make(map[config.Key]*config.Object, len(vss))
			for _, e := range vss {
				byKey[e.Object.Key] = e.Object
			}
		}
		return byKey[k]
	}
	var out []*config.Entry
	for i, e := range vss {
		m, _ := config.MergeDelegates(e.Object, get)
		if m == e.Object {
			if out != nil {
				out = append(out, e)
			}
			continue
		}
		if out == nil {
			out = append(make([]*config.Entry, 0, len(vss)), vss[:i]...)
		}
		c := *e
		c.Object = m
		out = append(out, &c)
	}
	if out == nil {
		return vss
	}
	return out
}
