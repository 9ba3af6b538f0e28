package xds

import (
	"fmt"
	"maps"
	"slices"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	otelalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	otlpcommonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/accesslog"
	"github.com/sextant-mesh/sextant/internal/config"
)

// Names of what WithTelemetry writes into a listener's HTTP connection
// manager, which the gateway reads back (docs/telemetry.md).
const (
	// FileAccessLogName names a file access log, as Envoy's.
	FileAccessLogName = "envoy.access_loggers.file"
	// OTelTracerName names the tracing provider: the gateway's OTLP
	// exporter, Envoy's OpenTelemetry tracer.
	OTelTracerName = "envoy.tracers.opentelemetry"
	// AccessLogPath is the path the access logs name; the gateway writes
	// to its own --access-log-file.
	AccessLogPath = accesslog.Stdout
	// OTelAccessLogName names the otel provider's access log, Envoy's
	// OpenTelemetry access logger; it sends to OTelCollectorCluster (the
	// gateway to its own --access-log-otlp-endpoint).
	OTelAccessLogName = "envoy.access_loggers.open_telemetry"
	// OTelCollectorCluster is the collector's cluster an Envoy must
	// have for the otel provider ("sextant envoy bootstrap
	// --otel-collector" writes it).
	OTelCollectorCluster = "sextant-otel-collector"
)

// WithTelemetry writes p into every HTTP connection manager of l, as
// Istio does: tracing (random sampling, custom tags; the OpenTelemetry
// provider unless span reporting is disabled) and one file access log per
// provider, with its filter as Envoy's status code and duration filters.
// An empty p leaves l as it is.
func WithTelemetry(l *listenerv3.Listener, p config.TelemetryPolicy) error {
	if !p.Tracing.Set && len(p.AccessLogs) == 0 {
		return nil
	}
	tr, logs, err := telemetryHCM(p)
	if err != nil {
		return fmt.Errorf("xds: listener %s: %w", l.Name, err)
	}
	for _, fc := range l.FilterChains {
		for _, f := range fc.Filters {
			tc := f.GetTypedConfig()
			if tc == nil {
				continue
			}
			h := &hcmv3.HttpConnectionManager{}
			if !tc.MessageIs(h) {
				continue
			}
			if err := tc.UnmarshalTo(h); err != nil {
				return fmt.Errorf("xds: listener %s: %w", l.Name, err)
			}
			h.Tracing, h.AccessLog = tr, logs
			a := &anypb.Any{}
			if err := anypb.MarshalFrom(a, h, deterministic); err != nil {
				return fmt.Errorf("xds: listener %s: %w", l.Name, err)
			}
			f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
		}
	}
	return nil
}

func telemetryHCM(p config.TelemetryPolicy) (*hcmv3.HttpConnectionManager_Tracing, []*accesslogv3.AccessLog, error) {
	var tr *hcmv3.HttpConnectionManager_Tracing
	if t := p.Tracing; t.Set {
		tr = &hcmv3.HttpConnectionManager_Tracing{}
		if t.HasSampling {
			tr.RandomSampling = &typev3.Percent{Value: t.Sampling}
		}
		for _, k := range slices.Sorted(maps.Keys(t.CustomTags)) {
			ct := &tracingv3.CustomTag{Tag: k}
			switch tag := t.CustomTags[k]; {
			case tag.GetLiteral() != nil:
				ct.Type = &tracingv3.CustomTag_Literal_{Literal: &tracingv3.CustomTag_Literal{Value: tag.GetLiteral().Value}}
			case tag.GetHeader() != nil:
				ct.Type = &tracingv3.CustomTag_RequestHeader{RequestHeader: &tracingv3.CustomTag_Header{
					Name: tag.GetHeader().Name, DefaultValue: tag.GetHeader().DefaultValue}}
			case tag.GetEnvironment() != nil:
				ct.Type = &tracingv3.CustomTag_Environment_{Environment: &tracingv3.CustomTag_Environment{
					Name: tag.GetEnvironment().Name, DefaultValue: tag.GetEnvironment().DefaultValue}}
			default:
				continue // refused at apply
			}
			tr.CustomTags = append(tr.CustomTags, ct)
		}
		if !t.DisableSpanReporting {
			a, err := anypb.New(&tracev3.OpenTelemetryConfig{})
			if err != nil {
				return nil, nil, err
			}
			tr.Provider = &tracev3.Tracing_Http{Name: OTelTracerName, ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: a}}
		}
	}
	var logs []*accesslogv3.AccessLog
	for _, al := range p.AccessLogs {
		name, a, err := accessLogConfig(al.Provider)
		if err != nil {
			return nil, nil, err
		}
		logs = append(logs, &accesslogv3.AccessLog{Name: name, Filter: logFilter(al.Filter),
			ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: a}})
	}
	return tr, logs, nil
}

// accessLogConfig is provider's access logger: a file access log in
// Envoy's text or Istio's JSON format, or (otel) Envoy's OpenTelemetry
// access logger with the text format as each record's body, as Istio
// writes its envoyOtelAls providers.
func accessLogConfig(provider string) (string, *anypb.Any, error) {
	text := &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
		Specifier: &corev3.DataSource_InlineString{InlineString: accesslog.TextFormat}}}}
	var name string
	var m proto.Message
	switch provider {
	case config.ProviderOTelLogs:
		name = OTelAccessLogName
		m = &otelalsv3.OpenTelemetryAccessLogConfig{
			CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{
				LogName:             accesslog.LogName,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: OTelCollectorCluster}}},
			},
			Body: &otlpcommonv1.AnyValue{Value: &otlpcommonv1.AnyValue_StringValue{StringValue: accesslog.TextFormat}},
		}
	case config.ProviderEnvoyJSON:
		st, err := structpb.NewStruct(jsonFormat())
		if err != nil {
			return "", nil, err
		}
		name = FileAccessLogName
		m = &filev3.FileAccessLog{Path: AccessLogPath, AccessLogFormat: &filev3.FileAccessLog_LogFormat{LogFormat: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: st}}}}
	default:
		name = FileAccessLogName
		m = &filev3.FileAccessLog{Path: AccessLogPath, AccessLogFormat: &filev3.FileAccessLog_LogFormat{LogFormat: text}}
	}
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, deterministic); err != nil {
		return "", nil, err
	}
	return name, a, nil
}

func jsonFormat() map[string]any {
	m := make(map[string]any, len(accesslog.JSONFormat))
	for k, v := range accesslog.JSONFormat {
		m[k] = v
	}
	return m
}

// logFilter writes a Telemetry filter as Envoy's access log filters:
// each comparison a status code or duration filter (EQ, GE, LE; "!=" an
// OR of two), joined by an AND or OR filter. nil: none.
func logFilter(f *config.LogFilter) *accesslogv3.AccessLogFilter {
	if f == nil || len(f.Terms) == 0 {
		return nil
	}
	var fs []*accesslogv3.AccessLogFilter
	for _, t := range f.Terms {
		fs = append(fs, termFilter(t))
	}
	if len(fs) == 1 {
		return fs[0]
	}
	if f.Or {
		return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_OrFilter{OrFilter: &accesslogv3.OrFilter{Filters: fs}}}
	}
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{Filters: fs}}}
}

func termFilter(t config.LogTerm) *accesslogv3.AccessLogFilter {
	cmp := func(op accesslogv3.ComparisonFilter_Op, v int64) *accesslogv3.AccessLogFilter {
		c := &accesslogv3.ComparisonFilter{Op: op, Value: &corev3.RuntimeUInt32{DefaultValue: uint32(max(min(v, 1<<32-1), 0)), RuntimeKey: "sextant.access_log." + t.Attr}}
		if t.Attr == config.AttrResponseDuration {
			return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_DurationFilter{DurationFilter: &accesslogv3.DurationFilter{Comparison: c}}}
		}
		return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogv3.StatusCodeFilter{Comparison: c}}}
	}
	never := func() *accesslogv3.AccessLogFilter { // v < 0 matches nothing
		return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{
			Filters: []*accesslogv3.AccessLogFilter{cmp(accesslogv3.ComparisonFilter_GE, 1), cmp(accesslogv3.ComparisonFilter_LE, 0)}}}}
	}
	v := t.Value
	switch t.Op {
	case "==":
		return cmp(accesslogv3.ComparisonFilter_EQ, v)
	case ">=":
		return cmp(accesslogv3.ComparisonFilter_GE, v)
	case "<=":
		return cmp(accesslogv3.ComparisonFilter_LE, v)
	case ">":
		return cmp(accesslogv3.ComparisonFilter_GE, v+1)
	case "<":
		if v == 0 {
			return never()
		}
		return cmp(accesslogv3.ComparisonFilter_LE, v-1)
	}
	// "!="
	if v == 0 {
		return cmp(accesslogv3.ComparisonFilter_GE, 1)
	}
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_OrFilter{OrFilter: &accesslogv3.OrFilter{
		Filters: []*accesslogv3.AccessLogFilter{cmp(accesslogv3.ComparisonFilter_LE, v-1), cmp(accesslogv3.ComparisonFilter_GE, v+1)}}}}
}
