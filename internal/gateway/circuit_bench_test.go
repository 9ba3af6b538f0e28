package gateway_test

import (
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// BenchmarkProxyCircuit is BenchmarkProxy without circuit breakers
// ("none") and with limits that every call passes through but none
// reaches ("limits": a request, a connection slot and the pending check
// per call): the ratio of the two is what enforcing them costs, and their
// allocs/op must be equal (the circuit allocates nothing).
func BenchmarkProxyCircuit(b *testing.B) {
	b.Run("none", func(b *testing.B) { benchProxyWith(b, gateway.Options{}) })
	b.Run("limits", func(b *testing.B) {
		benchProxyWith(b, gateway.Options{}, func(c *cluster.Cluster) {
			c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
				MaxConnections: wrapperspb.UInt32(100000), MaxPendingRequests: wrapperspb.UInt32(100000),
				MaxRequests: wrapperspb.UInt32(100000), MaxRetries: wrapperspb.UInt32(3)}}}
		})
	})
}
