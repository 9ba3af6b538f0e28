package xds

import (
	"math"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/config"
)

// TestCircuitAsIstio: a connectionPool's limits are published as Istio's
// applyConnectionPool publishes them (the circuit-breaking task's config
// dump), and a cluster without any carries Istio's defaults, the largest
// values.
func TestCircuitAsIstio(t *testing.T) {
	max := wrapperspb.UInt32(math.MaxUint32)
	if got, want := Cluster("default/httpbin", config.Policy{}).GetCircuitBreakers(),
		(&clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{MaxConnections: max,
			MaxPendingRequests: max, MaxRequests: max, MaxRetries: max, TrackRemaining: true}}}); !proto.Equal(got, want) {
		t.Errorf("default thresholds: %v, want %v", got, want)
	}
	// The task's rule: maxConnections 1, http1MaxPendingRequests 1,
	// maxRequestsPerConnection 1.
	c := Cluster("default/httpbin", config.Policy{Circuit: config.Circuit{MaxConnections: 1, MaxPendingRequests: 1, MaxRequestsPerConnection: 1}})
	th := c.GetCircuitBreakers().GetThresholds()[0]
	if th.GetMaxConnections().GetValue() != 1 || th.GetMaxPendingRequests().GetValue() != 1 ||
		th.GetMaxRequests().GetValue() != math.MaxUint32 || th.GetMaxRetries().GetValue() != math.MaxUint32 || !th.GetTrackRemaining() {
		t.Errorf("task thresholds: %v", th)
	}
	var o upstreamhttpv3.HttpProtocolOptions
	if err := c.GetTypedExtensionProtocolOptions()[HTTPProtocolOptionsKey].UnmarshalTo(&o); err != nil {
		t.Fatal(err)
	}
	if o.GetCommonHttpProtocolOptions().GetMaxRequestsPerConnection().GetValue() != 1 ||
		o.GetExplicitHttpConfig().GetHttpProtocolOptions() == nil || c.GetCommonHttpProtocolOptions() != nil {
		t.Errorf("task protocol options: %v (deprecated %v)", &o, c.GetCommonHttpProtocolOptions())
	}
	// HTTP/2 endpoints: max_concurrent_streams on the HTTP/2 options, the
	// idle timeout and connection duration on the common ones; keepalive
	// in seconds.
	c = Cluster("default/grpc", config.Policy{HTTP2: true, IdleTimeout: time.Minute, Circuit: config.Circuit{MaxRequests: 100, MaxRetries: 3,
		MaxConcurrentStreams: 10, MaxConnectionDuration: time.Hour, Keepalive: true, KeepaliveProbes: 3, KeepaliveTime: 2 * time.Minute, KeepaliveInterval: 75 * time.Second}})
	if err := c.GetTypedExtensionProtocolOptions()[HTTPProtocolOptionsKey].UnmarshalTo(&o); err != nil {
		t.Fatal(err)
	}
	want := &upstreamhttpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(time.Minute), MaxConnectionDuration: durationpb.New(time.Hour)},
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{MaxConcurrentStreams: wrapperspb.UInt32(10)}}}},
	}
	if !proto.Equal(&o, want) {
		t.Errorf("h2 protocol options: %v, want %v", &o, want)
	}
	th = c.GetCircuitBreakers().GetThresholds()[0]
	if th.GetMaxRequests().GetValue() != 100 || th.GetMaxRetries().GetValue() != 3 || th.GetMaxConnections().GetValue() != math.MaxUint32 {
		t.Errorf("h2 thresholds: %v", th)
	}
	if ka := c.GetUpstreamConnectionOptions().GetTcpKeepalive(); ka.GetKeepaliveProbes().GetValue() != 3 ||
		ka.GetKeepaliveTime().GetValue() != 120 || ka.GetKeepaliveInterval().GetValue() != 75 {
		t.Errorf("keepalive: %v", ka)
	}
	rb := Cluster("default/grpc", config.Policy{Circuit: config.Circuit{RetryBudget: true, RetryBudgetPercent: 25, RetryBudgetMin: 4}}).
		GetCircuitBreakers().GetThresholds()[0].GetRetryBudget()
	if rb.GetBudgetPercent().GetValue() != 25 || rb.GetMinRetryConcurrency().GetValue() != 4 {
		t.Errorf("retry budget: %v", rb)
	}
	if err := c.ValidateAll(); err != nil {
		t.Errorf("ValidateAll: %v", err)
	}
}
