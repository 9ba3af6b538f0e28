package xds

import (
	"sort"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/config"
)

// healthChecks is a cluster's health_checks from a DestinationRule's
// AnnotationHealthCheck, in Envoy's schema (the gateway and Envoy run it;
// grpc-go ignores it).
func healthChecks(hc *config.HealthCheck) []*corev3.HealthCheck {
	if hc == nil {
		return nil
	}
	d := func(v time.Duration) *durationpb.Duration {
		if v == 0 {
			return nil
		}
		return durationpb.New(v)
	}
	out := &corev3.HealthCheck{
		Timeout: d(hc.Timeout), Interval: d(hc.Interval),
		IntervalJitter: d(hc.IntervalJitter), IntervalJitterPercent: hc.IntervalJitterPercent,
		NoTrafficInterval:  d(hc.NoTrafficInterval),
		HealthyThreshold:   wrapperspb.UInt32(hc.HealthyThreshold),
		UnhealthyThreshold: wrapperspb.UInt32(hc.UnhealthyThreshold),
	}
	switch {
	case hc.HTTP != nil:
		h := &corev3.HealthCheck_HttpHealthCheck{Path: hc.HTTP.Path, Host: hc.HTTP.Host}
		for _, r := range hc.HTTP.ExpectedStatuses {
			h.ExpectedStatuses = append(h.ExpectedStatuses, &typev3.Int64Range{Start: int64(r.First), End: int64(r.Last) + 1})
		}
		keys := make([]string, 0, len(hc.HTTP.Headers))
		for k := range hc.HTTP.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys) // the same annotation encodes the same bytes
		for _, k := range keys {
			h.RequestHeadersToAdd = append(h.RequestHeadersToAdd, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: hc.HTTP.Headers[k]}})
		}
		out.HealthChecker = &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: h}
	case hc.GRPC != nil:
		out.HealthChecker = &corev3.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{ServiceName: hc.GRPC.Service}}
	default:
		out.HealthChecker = &corev3.HealthCheck_TcpHealthCheck_{TcpHealthCheck: &corev3.HealthCheck_TcpHealthCheck{}}
	}
	return []*corev3.HealthCheck{out}
}
