package commit

import "github.com/sextant-mesh/sextant/internal/store"

// Written calls fn for each record of kind k that an earlier write of the
// batch, or a batch committed but not yet applied, wrote: its id and value
// (nil: deleted). A write that decides on every record of a kind (a
// Gateway's port and host claims against every other Gateway's) reads the
// catalog's table and then these, so two writes of one batch cannot both
// claim what only one may. In a cluster reading an earlier write of the
// batch makes the write depend on it, as Get does.
func (t *Tx) Written(k store.Kind, fn func(id string, value any)) {
	seen := map[string]bool{}
	for rk, p := range t.over {
		if rk.kind != k {
			continue
		}
		if p.by != t.cur && t.e.shared {
			t.dep = true
		}
		seen[rk.id] = true
		fn(rk.id, p.value)
	}
	if !t.inflight {
		return
	}
	for i := len(t.e.inflight) - 1; i >= 0; i-- {
		for rk, p := range t.e.inflight[i].recs {
			if rk.kind == k && !seen[rk.id] {
				seen[rk.id] = true
				fn(rk.id, p.value)
			}
		}
	}
}
