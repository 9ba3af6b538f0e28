package xds

import (
	"math"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/config"
)

// circuitBreakers is a cluster's circuit_breakers as Istio publishes them
// on every cluster (pilot's getDefaultCircuitBreakerThresholds): each
// threshold the DestinationRule's connectionPool does not set is the
// largest value, not Envoy's default of 1,024 (nor grpc-go's, also 1,024
// requests), and Envoy tracks what remains.
func circuitBreakers(c config.Circuit) *clusterv3.CircuitBreakers {
	limit := func(v uint32) *wrapperspb.UInt32Value {
		if v == 0 {
			v = math.MaxUint32
		}
		return wrapperspb.UInt32(v)
	}
	th := &clusterv3.CircuitBreakers_Thresholds{
		MaxConnections:     limit(c.MaxConnections),
		MaxPendingRequests: limit(c.MaxPendingRequests),
		MaxRequests:        limit(c.MaxRequests),
		MaxRetries:         limit(c.MaxRetries),
		TrackRemaining:     true,
	}
	if c.RetryBudget {
		// trafficPolicy.retryBudget, as Istio's applyRetryBudget.
		th.RetryBudget = &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
			BudgetPercent:       &typev3.Percent{Value: c.RetryBudgetPercent},
			MinRetryConcurrency: wrapperspb.UInt32(c.RetryBudgetMin),
		}
	}
	return &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{th}}
}

// tcpKeepalive is tcp.tcpKeepalive as Istio's setKeepAliveSettings writes
// it: an empty message turns SO_KEEPALIVE on with the system's times.
func tcpKeepalive(c config.Circuit) *clusterv3.UpstreamConnectionOptions {
	if !c.Keepalive {
		return nil
	}
	ka := &corev3.TcpKeepalive{}
	if c.KeepaliveProbes > 0 {
		ka.KeepaliveProbes = wrapperspb.UInt32(c.KeepaliveProbes)
	}
	if c.KeepaliveTime > 0 {
		ka.KeepaliveTime = wrapperspb.UInt32(uint32(c.KeepaliveTime.Seconds()))
	}
	if c.KeepaliveInterval > 0 {
		ka.KeepaliveInterval = wrapperspb.UInt32(uint32(c.KeepaliveInterval.Seconds()))
	}
	return &clusterv3.UpstreamConnectionOptions{TcpKeepalive: ka}
}

// httpOptions is the cluster's typed HttpProtocolOptions when a
// per-connection limit is set (maxRequestsPerConnection,
// maxConnectionDuration, maxConcurrentStreams of an HTTP/2 cluster), as
// Istio writes it: common_http_protocol_options (with the idle timeout)
// and the explicit protocol, HTTP/1.1 unless the cluster speaks HTTP/2.
// nil when none is set.
func httpOptions(p config.Policy) *anypb.Any {
	c := p.Circuit
	if c.MaxRequestsPerConnection == 0 && c.MaxConnectionDuration == 0 && (c.MaxConcurrentStreams == 0 || !p.HTTP2) {
		return nil
	}
	common := &corev3.HttpProtocolOptions{}
	if p.IdleTimeout > 0 {
		common.IdleTimeout = durationpb.New(p.IdleTimeout)
	}
	if c.MaxRequestsPerConnection > 0 {
		common.MaxRequestsPerConnection = wrapperspb.UInt32(c.MaxRequestsPerConnection)
	}
	if c.MaxConnectionDuration > 0 {
		common.MaxConnectionDuration = durationpb.New(c.MaxConnectionDuration)
	}
	explicit := &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{
			HttpProtocolOptions: &corev3.Http1ProtocolOptions{}}}
	if p.HTTP2 {
		h2 := &corev3.Http2ProtocolOptions{}
		if c.MaxConcurrentStreams > 0 {
			h2.MaxConcurrentStreams = wrapperspb.UInt32(c.MaxConcurrentStreams)
		}
		explicit.ProtocolConfig = &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: h2}
	}
	a, err := anypb.New(&upstreamhttpv3.HttpProtocolOptions{CommonHttpProtocolOptions: common,
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: explicit}})
	if err != nil {
		panic(err) // a message of known fields always marshals
	}
	return a
}
