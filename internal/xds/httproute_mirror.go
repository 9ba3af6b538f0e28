//lint:file-ignore SA1019 Istio's deprecated mirrorPercent is still written in configs; it is read as Istio reads it.

package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
)

// mirrorPolicies are a route's request_mirror_policies as Istio writes
// them: mirror with mirrorPercentage (or the deprecated mirrorPercent; none:
// all calls), then each of mirrors with its percentage; a share of 0 is no
// policy. trace_sampled is false, as Istio sets it.
func mirrorPolicies(ns string, hr *networking.HTTPRoute, clusterFor ClusterFor) []*routev3.RouteAction_RequestMirrorPolicy {
	var out []*routev3.RouteAction_RequestMirrorPolicy
	add := func(d *networking.Destination, share *corev3.RuntimeFractionalPercent) {
		if d == nil || share == nil {
			return
		}
		k, err := config.ResolveHost(d.Host, ns)
		if err != nil {
			return
		}
		name, _ := clusterFor(config.Destination{Service: k, Subset: d.Subset, Port: d.GetPort().GetNumber()})
		if name == "" {
			return
		}
		out = append(out, &routev3.RouteAction_RequestMirrorPolicy{Cluster: name, RuntimeFraction: share,
			TraceSampled: wrapperspb.Bool(false)})
	}
	if hr.Mirror != nil {
		switch {
		case hr.MirrorPercentage != nil:
			add(hr.Mirror, percentShare(hr.MirrorPercentage))
		case hr.MirrorPercent != nil:
			if v := hr.MirrorPercent.GetValue(); v > 0 {
				add(hr.Mirror, &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: v,
					Denominator: typev3.FractionalPercent_HUNDRED}})
			}
		default:
			add(hr.Mirror, &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: 100,
				Denominator: typev3.FractionalPercent_HUNDRED}})
		}
	}
	for _, m := range hr.Mirrors {
		if m.Percentage == nil {
			add(m.Destination, &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: 100,
				Denominator: typev3.FractionalPercent_HUNDRED}})
			continue
		}
		add(m.Destination, percentShare(m.Percentage))
	}
	return out
}

// percentShare is a Percent as a share of a million; nil for 0.
func percentShare(p *networking.Percent) *corev3.RuntimeFractionalPercent {
	if p.GetValue() <= 0 {
		return nil
	}
	return &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: uint32(p.GetValue() * 10000),
		Denominator: typev3.FractionalPercent_MILLION}}
}
