package push

import (
	"maps"
	"slices"

	"github.com/sextant-mesh/sextant/internal/config"
)

// sidecars hands the cache the Sidecars in force (and the ServiceEntries,
// whose hosts a Sidecar imports by the entry's namespace) when a batch
// changed one: each subscriber is then sent only what its Sidecar imports
// (internal/xds/sidecarscope.go). Called by the config worker before the
// round, so that the round's resources go out already scoped.
func (w *configWorker) sidecars(b configBatch) {
	if w.side == nil {
		w.side = map[config.Key]*config.Object{}
	}
	changed := false
	if b.snap != nil {
		clear(w.side)
		for _, o := range b.snap.Configs {
			if scopes(o.Kind) {
				w.side[o.Key] = o
			}
		}
		changed = true
	}
	for _, ch := range b.changes {
		if !scopes(ch.ConfigKey.Kind) {
			continue
		}
		changed = true
		if ch.Op == ConfigUpsert {
			w.side[ch.ConfigKey] = ch.Config
		} else {
			delete(w.side, ch.ConfigKey)
		}
	}
	if changed {
		w.e.cache.SetSidecars(config.NewSidecars(w.e.opts.RootNamespace, slices.Collect(maps.Values(w.side))))
	}
}

// scopes reports whether objects of kind decide what a Sidecar imports.
func scopes(kind string) bool { return kind == config.KindSidecar || kind == config.KindServiceEntry }
