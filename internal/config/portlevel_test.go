package config

import (
	"errors"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1"
)

// TestPortLevelSettings: a port's settings replace the rule's policy whole
// for that port's clusters (omitted groups fall back to defaults, as in
// Istio); a subset's own settings apply over the rule's port settings, and
// its port settings replace all.
func TestPortLevelSettings(t *testing.T) {
	dr := mustDecode(t, `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: g}
spec:
  host: www.googleapis.com
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
    connectionPool: {tcp: {connectTimeout: 2s}}
    portLevelSettings:
    - port: {number: 443}
      tls: {mode: SIMPLE}
  subsets:
  - name: a
    trafficPolicy: {loadBalancer: {simple: RANDOM}}
  - name: b
    trafficPolicy:
      portLevelSettings:
      - port: {number: 443}
        connectionPool: {tcp: {connectTimeout: 1s}}
`)
	for _, c := range []struct {
		subset  string
		port    uint32
		lb      string
		connect string
		tls     bool
	}{
		{"", 0, PolicyLeastRequest, "2s", false},
		{"", 80, PolicyLeastRequest, "2s", false},
		{"", 443, "", "0s", true},
		{"a", 80, PolicyRandom, "2s", false},
		{"a", 443, PolicyRandom, "0s", true},
		{"b", 443, "", "1s", false},
	} {
		p := EffectivePolicy(dr, c.subset, c.port)
		if p.LoadBalancer != c.lb || p.ConnectTimeout.String() != c.connect || (p.TLS.GetMode() == networking.ClientTLSSettings_SIMPLE) != c.tls {
			t.Errorf("%q port %d: lb %q connect %v tls %v; want %q %s %v", c.subset, c.port, p.LoadBalancer, p.ConnectTimeout, p.TLS, c.lb, c.connect, c.tls)
		}
	}
}

func TestPortLevelSettingsErrors(t *testing.T) {
	const dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\nspec:\n  host: a\n  trafficPolicy:\n    portLevelSettings:\n"
	for _, c := range []struct {
		name, yaml, path string
		err              error
		msg              string
	}{
		{"no port", dr + "    - tls: {mode: SIMPLE}\n", "spec.trafficPolicy.portLevelSettings[0].port.number", ErrInvalid, "1..65535"},
		{"twice", dr + "    - {port: {number: 80}}\n    - {port: {number: 80}}\n", "spec.trafficPolicy.portLevelSettings[1].port.number", ErrInvalid, "another entry"},
		{"hash", dr + "    - {port: {number: 80}, loadBalancer: {consistentHash: {httpHeaderName: x}}}\n", "spec.trafficPolicy.portLevelSettings[0].loadBalancer.consistentHash", ErrNotSupported, "port level"},
		{"nested check", dr + "    - {port: {number: 80}, outlierDetection: {maxEjectionPercent: 101}}\n", "spec.trafficPolicy.portLevelSettings[0].outlierDetection.maxEjectionPercent", ErrInvalid, "0..100"},
		{"unknown", dr + "    - {port: {number: 80}, tunnel: {protocol: CONNECT}}\n", "spec.trafficPolicy.portLevelSettings[0].tunnel", ErrUnknownField, ""},
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
