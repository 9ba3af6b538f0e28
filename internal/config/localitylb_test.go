package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/locality"
)

// istio.io's localityLbSetting examples decode into the rules the EDS
// variants apply; a subset's loadBalancer replaces the rule's.
func TestLocalityLbSetting(t *testing.T) {
	dr := mustDecode(t, `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: helloworld}
spec:
  host: helloworld
  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        enabled: true
        distribute:
        - from: region1/zone1/*
          to: {"region1/zone1/*": 70, "region1/*": 30}
    outlierDetection: {consecutive5xxErrors: 1}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      loadBalancer:
        simple: ROUND_ROBIN
        localityLbSetting:
          failover: [{from: region1, to: region2}]
  - name: "off"
    labels: {version: v2}
    trafficPolicy: {loadBalancer: {localityLbSetting: {enabled: false}}}
`)
	p := EffectivePolicy(dr, "", 0).Locality
	want := []locality.Distribute{{From: "region1/zone1/*", To: []locality.Share{{Pattern: "region1/zone1/*", Weight: 70}, {Pattern: "region1/*", Weight: 30}}}}
	if p == nil || p.Off || !slices.EqualFunc(p.Distribute, want, func(a, b locality.Distribute) bool { return a.From == b.From && slices.Equal(a.To, b.To) }) {
		t.Fatalf("distribute: %+v, want %+v", p, want)
	}
	if p := EffectivePolicy(dr, "v1", 0).Locality; p == nil || !slices.Equal(p.Failover, []locality.Failover{{From: "region1", To: "region2"}}) {
		t.Fatalf("failover: %+v", p)
	}
	if p := EffectivePolicy(dr, "off", 0).Locality; p == nil || !p.Off {
		t.Fatalf("enabled false: %+v", p)
	}
}

func TestLocalityLbSettingErrors(t *testing.T) {
	const dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\nspec:\n  host: a\n  trafficPolicy:\n    loadBalancer:\n      localityLbSetting:\n"
	const path = "spec.trafficPolicy.loadBalancer.localityLbSetting"
	for _, c := range []struct {
		name, yaml, path string
		err              error
		msg              string
	}{
		{"sum", dr + "        distribute: [{from: 'r1/*', to: {'r1/z1': 60, 'r1/z2': 30}}]\n", path + ".distribute[0].to", ErrInvalid, "sum to 90"},
		{"pattern", dr + "        distribute: [{from: 'r1//z', to: {'r1': 100}}]\n", path + ".distribute[0].from", ErrInvalid, "three parts"},
		{"both", dr + "        distribute: [{from: 'r1', to: {'r1': 100}}]\n        failover: [{from: r1, to: r2}]\n", path, ErrInvalid, "both"},
		{"same region", dr + "        failover: [{from: r1, to: r1}]\n", path + ".failover[0]", ErrInvalid, "both \"r1\""},
		{"zone", dr + "        failover: [{from: r1/z1, to: r2}]\n", path + ".failover[0].from", ErrInvalid, "want a region"},
		{"failoverPriority bad key", dr + "        failoverPriority: [\"a b\"]\n", path + ".failoverPriority[0]", ErrInvalid, "want a label key"},
		{"failoverPriority topology with failover", dr + "        failover: [{from: r1, to: r2}]\n        failoverPriority: [topology.kubernetes.io/region]\n", path + ".failoverPriority[0]", ErrInvalid, "cannot be set with failover"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.yaml))
			var list Errors
			if !errors.As(err, &list) {
				t.Fatalf("got %v, want field errors", err)
			}
			for _, fe := range list {
				if fe.Path == c.path && errors.Is(fe, c.err) && strings.Contains(fe.Msg, c.msg) {
					return
				}
			}
			t.Fatalf("got %v; want path %q (%v) containing %q", err, c.path, c.err, c.msg)
		})
	}
}
