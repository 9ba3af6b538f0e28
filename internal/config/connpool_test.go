package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestConnPool: the circuit-breaking task's rule and every other limit of
// connectionPool are read into the policy; a subset's connectionPool
// replaces the rule's whole, as Istio merges it.
func TestConnPool(t *testing.T) {
	dr := mustDecode(t, `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: httpbin}
spec:
  host: httpbin
  trafficPolicy:
    connectionPool:
      tcp:
        maxConnections: 1
        maxConnectionDuration: 1h
        tcpKeepalive: {probes: 3, time: 60s, interval: 10s}
      http:
        http1MaxPendingRequests: 1
        http2MaxRequests: 100
        maxRequestsPerConnection: 1
        maxRetries: 3
        maxConcurrentStreams: 10
    retryBudget: {percent: 50}
  subsets:
  - name: v2
    labels: {version: v2}
    trafficPolicy: {connectionPool: {http: {http2MaxRequests: 5}}, retryBudget: {minRetryConcurrency: 7}}
`)
	want := Circuit{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 100, MaxRetries: 3, MaxRequestsPerConnection: 1,
		MaxConcurrentStreams: 10, MaxConnectionDuration: time.Hour, Keepalive: true, KeepaliveProbes: 3,
		KeepaliveTime: time.Minute, KeepaliveInterval: 10 * time.Second, RetryBudget: true, RetryBudgetPercent: 50, RetryBudgetMin: 3}
	if got := EffectivePolicy(dr, "", 0).Circuit; got != want {
		t.Errorf("rule: %+v, want %+v", got, want)
	}
	if got := EffectivePolicy(dr, "v2", 0).Circuit; got != (Circuit{MaxRequests: 5, RetryBudget: true, RetryBudgetPercent: 20, RetryBudgetMin: 7}) {
		t.Errorf("subset: %+v, want http2MaxRequests 5 and its own retry budget (20%%, 7)", got)
	}
	if got := EffectivePolicy(dr, "", 8080).Circuit; !got.RetryBudget || got.RetryBudgetPercent != 50 {
		t.Errorf("a port's cluster: %+v, want the rule's retry budget", got)
	}
}

func TestConnPoolErrors(t *testing.T) {
	const dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\nspec:\n  host: a\n  trafficPolicy:\n    connectionPool:\n"
	for _, c := range []struct {
		name, yaml, path string
		msg              string
	}{
		{"negative connections", dr + "      tcp: {maxConnections: -1}\n", "spec.trafficPolicy.connectionPool.tcp.maxConnections", "negative"},
		{"negative pending", dr + "      http: {http1MaxPendingRequests: -1}\n", "spec.trafficPolicy.connectionPool.http.http1MaxPendingRequests", "negative"},
		{"negative retries", dr + "      http: {maxRetries: -2}\n", "spec.trafficPolicy.connectionPool.http.maxRetries", "negative"},
		{"zero duration", dr + "      tcp: {maxConnectionDuration: 0s}\n", "spec.trafficPolicy.connectionPool.tcp.maxConnectionDuration", "more than 0"},
		{"keepalive ms", dr + "      tcp: {tcpKeepalive: {time: 1500ms}}\n", "spec.trafficPolicy.connectionPool.tcp.tcpKeepalive.time", "whole seconds"},
		{"budget percent", dr + "      tcp: {}\n    retryBudget: {percent: 101}\n", "spec.trafficPolicy.retryBudget.percent", "0..100"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.yaml))
			var list Errors
			if !errors.As(err, &list) {
				t.Fatalf("got %v, want field errors", err)
			}
			for _, fe := range list {
				if fe.Path == c.path && errors.Is(fe, ErrInvalid) && strings.Contains(fe.Msg, c.msg) {
					return
				}
			}
			t.Fatalf("got %v; want path %q containing %q", err, c.path, c.msg)
		})
	}
}
