package gateway

import (
	"reflect"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	envoytype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/xds"
)

func baseCheck() *core.HealthCheck {
	return &core.HealthCheck{Timeout: durationpb.New(time.Second), Interval: durationpb.New(5 * time.Second),
		UnhealthyThreshold: wrapperspb.UInt32(3), HealthyThreshold: wrapperspb.UInt32(0),
		HealthChecker: &core.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &core.HealthCheck_HttpHealthCheck{Path: "/healthz"}}}
}

func TestHealthCheckDecode(t *testing.T) {
	s, err := decodeHealthChecks([]*core.HealthCheck{baseCheck()})
	if err != nil {
		t.Fatal(err)
	}
	if s.kind != hcHTTP || s.method != "GET" || s.healthyThreshold != 1 || s.unhealthyThreshold != 3 ||
		s.noTraffic != 60*time.Second || len(s.expected) != 1 || s.expected[0] != [2]int64{200, 201} {
		t.Errorf("defaults: %+v", s)
	}
	g := baseCheck()
	g.HealthChecker = &core.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &core.HealthCheck_GrpcHealthCheck{ServiceName: "orders"}}
	if s, err := decodeHealthChecks([]*core.HealthCheck{g}); err != nil || s.kind != hcGRPC || s.service != "orders" {
		t.Errorf("grpc: %+v %v", s, err)
	}
}

// TestHealthCheckRefused: what the gateway cannot run is refused naming
// the field, never skipped.
func TestHealthCheckRefused(t *testing.T) {
	for _, tc := range []struct {
		field string
		mod   func(*core.HealthCheck)
	}{
		{"health_checks[0].timeout", func(h *core.HealthCheck) { h.Timeout = nil }},
		{"health_checks[0].interval", func(h *core.HealthCheck) { h.Interval = durationpb.New(0) }},
		{"health_checks[0].unhealthy_threshold", func(h *core.HealthCheck) { h.UnhealthyThreshold = nil }},
		{"health_checks[0].interval_jitter_percent", func(h *core.HealthCheck) { h.IntervalJitterPercent = 101 }},
		{"health_checks[0].alt_port", func(h *core.HealthCheck) { h.AltPort = wrapperspb.UInt32(9) }},
		{"health_checks[0].custom_health_check", func(h *core.HealthCheck) {
			h.HealthChecker = &core.HealthCheck_CustomHealthCheck_{CustomHealthCheck: &core.HealthCheck_CustomHealthCheck{Name: "redis"}}
		}},
		{"health_checks[0].health_checker", func(h *core.HealthCheck) { h.HealthChecker = nil }},
		{"health_checks[0].http_health_check.path", func(h *core.HealthCheck) { h.GetHttpHealthCheck().Path = "healthz" }},
		{"health_checks[0].http_health_check.host", func(h *core.HealthCheck) { h.GetHttpHealthCheck().Host = "a/b" }},
		{"health_checks[0].http_health_check.codec_client_type", func(h *core.HealthCheck) {
			h.GetHttpHealthCheck().CodecClientType = envoytype.CodecClientType_HTTP2
		}},
		{"health_checks[0].http_health_check.expected_statuses[0]", func(h *core.HealthCheck) {
			h.GetHttpHealthCheck().ExpectedStatuses = []*envoytype.Int64Range{{Start: 300, End: 200}}
		}},
		{"health_checks[0].http_health_check.method", func(h *core.HealthCheck) { h.GetHttpHealthCheck().Method = core.RequestMethod_CONNECT }},
		{"health_checks[0].http_health_check.request_headers_to_add[0].header.key", func(h *core.HealthCheck) {
			h.GetHttpHealthCheck().RequestHeadersToAdd = []*core.HeaderValueOption{{Header: &core.HeaderValue{Key: "bad key", Value: "v"}}}
		}},
		{"health_checks[0].tcp_health_check", func(h *core.HealthCheck) {
			h.HealthChecker = &core.HealthCheck_TcpHealthCheck_{TcpHealthCheck: &core.HealthCheck_TcpHealthCheck{
				Send: &core.HealthCheck_Payload{Payload: &core.HealthCheck_Payload_Text{Text: "50494e47"}}}}
		}},
		{"health_checks[0].grpc_health_check.authority", func(h *core.HealthCheck) {
			h.HealthChecker = &core.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &core.HealthCheck_GrpcHealthCheck{Authority: "x"}}
		}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			h := baseCheck()
			tc.mod(h)
			c := &cluster.Cluster{Name: "c", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS}, HealthChecks: []*core.HealthCheck{h}}
			_, err := decodeCluster(c)
			if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Fatalf("error %v, want one naming %s", err, tc.field)
			}
		})
	}
	c := &cluster.Cluster{Name: "c", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		HealthChecks: []*core.HealthCheck{baseCheck(), baseCheck()}}
	if _, err := decodeCluster(c); err == nil || !strings.HasPrefix(err.Error(), "health_checks:") {
		t.Fatalf("two checks: %v", err)
	}
}

// TestControlPlaneHealthCheck: the gateway runs the check Sextant's control
// plane publishes from a DestinationRule's sextant.io/health-check.
func TestControlPlaneHealthCheck(t *testing.T) {
	hc, err := config.ParseHealthCheck(`{"http": {"path": "/healthz", "host": "orders", "expected_statuses": ["200-204"], "headers": {"x-a": "1"}}, "interval": "2s", "no_traffic_interval": "5s", "interval_jitter_percent": 10}`)
	if err != nil {
		t.Fatal(err)
	}
	s, err := decodeCluster(xds.Cluster("default/orders", config.Policy{HealthCheck: hc}))
	if err != nil {
		t.Fatal(err)
	}
	want := &healthCheckSpec{kind: hcHTTP, timeout: time.Second, interval: 2 * time.Second, jitterPercent: 10,
		unhealthyThreshold: 3, healthyThreshold: 2, noTraffic: 5 * time.Second, path: "/healthz", host: "orders", method: "GET",
		headers: [][2]string{{"x-a", "1"}}, expected: [][2]int64{{200, 205}}}
	if !reflect.DeepEqual(s.hc, want) {
		t.Errorf("got %+v\nwant %+v", s.hc, want)
	}
	for _, v := range []string{`{"tcp": {}}`, `{"grpc": {"service_name": "orders"}}`} {
		hc, _ := config.ParseHealthCheck(v)
		if s, err := decodeCluster(xds.Cluster("default/orders", config.Policy{HealthCheck: hc})); err != nil || s.hc == nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}
