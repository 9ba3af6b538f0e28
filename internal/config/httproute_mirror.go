//lint:file-ignore SA1019 Istio's deprecated mirrorPercent is still written in configs; it is read as Istio reads it.

package config

import (
	networking "istio.io/api/networking/v1"
)

// HTTPRoute mirroring (Istio's mirror, mirrors, mirrorPercentage): a copy
// of each call (or of a share of them) goes to another destination, fire
// and forget, with "-shadow" added to its host; its answers are dropped.
func init() {
	allow(&networking.HTTPRoute{}, "mirror", "mirrors", "mirror_percentage", "mirror_percent")
	allow(&networking.HTTPMirrorPolicy{}, "destination", "percentage")
}

func validateMirror(c errs, path, ns string, r *networking.HTTPRoute) {
	if r.Mirror == nil && len(r.Mirrors) == 0 {
		if r.MirrorPercentage != nil {
			c.add(join(path, "mirrorPercentage"), ErrInvalid, "set without mirror")
		}
		if r.MirrorPercent != nil {
			c.add(join(path, "mirrorPercent"), ErrInvalid, "set without mirror")
		}
		return
	}
	if len(r.Route) == 0 {
		c.add(join(path, "mirror"), ErrInvalid, "only with route: a redirect or direct response calls no destination to mirror")
	}
	if r.Mirror != nil {
		if len(r.Mirrors) > 0 {
			c.add(join(path, "mirrors"), ErrInvalid, "set mirror or mirrors, not both")
		}
		validateDestination(c, join(path, "mirror"), ns, r.Mirror)
	}
	if r.MirrorPercentage != nil && r.MirrorPercent != nil {
		c.add(join(path, "mirrorPercent"), ErrInvalid, "set mirrorPercentage or the deprecated mirrorPercent, not both")
	}
	if r.MirrorPercent != nil && r.MirrorPercent.Value > 100 {
		c.add(join(path, "mirrorPercent"), ErrInvalid, "%d not in [0, 100]", r.MirrorPercent.Value)
	}
	validatePercent(c, join(path, "mirrorPercentage"), r.MirrorPercentage)
	if len(r.Mirrors) > 0 && (r.MirrorPercentage != nil || r.MirrorPercent != nil) {
		c.add(join(path, "mirrorPercentage"), ErrInvalid, "with mirrors, each mirror's percentage says it")
	}
	for i, m := range r.Mirrors {
		p := index(join(path, "mirrors"), i)
		validateDestination(c, join(p, "destination"), ns, m.Destination)
		validatePercent(c, join(p, "percentage"), m.Percentage)
	}
}
