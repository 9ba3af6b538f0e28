package gateway

import (
	"fmt"
	"os"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	otelalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/sextant-mesh/sextant/internal/accesslog"
	"github.com/sextant-mesh/sextant/internal/trace"
)

// What a listener's HTTP connection manager says of tracing and access
// logs: what the control plane writes from the Telemetry kind
// (docs/telemetry.md, internal/xds.WithTelemetry). Names match Envoy's.
const (
	otelTracerName    = "envoy.tracers.opentelemetry"
	fileAccessLogName = "envoy.access_loggers.file"
	fileAccessLogType = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog"
	otelAccessLogType = "type.googleapis.com/envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig"
)

// listenerTelemetry is a listener's tracing and access logs; nil: the
// gateway's flags decide both.
type listenerTelemetry struct {
	tracing *tracingOverride // nil: the flags'
	logs    []accessLogSpec  // with logsSet: these, possibly none
	logsSet bool
}

// tracingOverride is the HCM's tracing: the sampling (when set), whether
// spans are exported, and the custom tags.
type tracingOverride struct {
	sampling    float64 // percent
	hasSampling bool
	report      bool
	tags        []customTag
}

// customTag is a span attribute: a literal (an environment variable's is
// read once, when the listener is decoded), or a request header's value.
type customTag struct {
	name, value string
	header      string // "": a literal
}

// accessLogSpec is one access log: its format and the filter a call must
// pass (nil: every call).
type accessLogSpec struct {
	enc    accesslog.Encoding
	filter *logPred
}

// logPred is an Envoy access log filter the gateway evaluates: a status
// code or duration comparison, or an AND or OR of them.
type logPred struct {
	kind  uint8 // predStatus, predDuration, predAnd, predOr
	op    accesslogv3.ComparisonFilter_Op
	value int64
	subs  []*logPred
}

const (
	predStatus uint8 = iota
	predDuration
	predAnd
	predOr
)

func (p *logPred) match(status int, d time.Duration) bool {
	switch p.kind {
	case predAnd:
		for _, s := range p.subs {
			if !s.match(status, d) {
				return false
			}
		}
		return true
	case predOr:
		for _, s := range p.subs {
			if s.match(status, d) {
				return true
			}
		}
		return false
	}
	v := int64(status)
	if p.kind == predDuration {
		v = d.Milliseconds()
	}
	switch p.op {
	case accesslogv3.ComparisonFilter_EQ:
		return v == p.value
	case accesslogv3.ComparisonFilter_LE:
		return v <= p.value
	}
	return v >= p.value
}

// decodeTelemetry reads the HCM's tracing and access_log (nil when it has
// neither).
func decodeTelemetry(path string, m *hcm.HttpConnectionManager) (*listenerTelemetry, error) {
	if m.GetTracing() == nil && len(m.GetAccessLog()) == 0 {
		return nil, nil
	}
	lt := &listenerTelemetry{}
	if tr := m.GetTracing(); tr != nil {
		p := path + ".tracing"
		o := &tracingOverride{}
		if rs := tr.GetRandomSampling(); rs != nil {
			if v := rs.GetValue(); !(v >= 0 && v <= 100) {
				return nil, fieldErr(p+".random_sampling.value", "%v: want 0 to 100", v)
			}
			o.sampling, o.hasSampling = rs.GetValue(), true
		}
		if tr.GetClientSampling() != nil || tr.GetOverallSampling() != nil {
			return nil, fieldErr(p, "client_sampling, overall_sampling: %v", errUnsupported)
		}
		if pr := tr.GetProvider(); pr != nil {
			if pr.GetName() != otelTracerName {
				return nil, fieldErr(p+".provider.name", "%q: %v (the gateway exports spans over OTLP: %s)", pr.GetName(), errUnsupported, otelTracerName)
			}
			o.report = true
		}
		for i, ct := range tr.GetCustomTags() {
			tp := fmt.Sprintf("%s.custom_tags[%d]", p, i)
			if ct.GetTag() == "" {
				return nil, fieldErr(tp+".tag", "empty")
			}
			t := customTag{name: ct.GetTag()}
			switch {
			case ct.GetLiteral() != nil:
				t.value = ct.GetLiteral().GetValue()
			case ct.GetEnvironment() != nil:
				v, ok := os.LookupEnv(ct.GetEnvironment().GetName())
				if !ok {
					v = ct.GetEnvironment().GetDefaultValue()
				}
				t.value = v
			case ct.GetRequestHeader() != nil:
				if ct.GetRequestHeader().GetName() == "" {
					return nil, fieldErr(tp+".request_header.name", "empty")
				}
				t.header, t.value = ct.GetRequestHeader().GetName(), ct.GetRequestHeader().GetDefaultValue()
			default:
				return nil, fieldErr(tp, "%T: %v (literal, environment, request_header)", ct.GetType(), errUnsupported)
			}
			o.tags = append(o.tags, t)
		}
		lt.tracing = o
	}
	for i, al := range m.GetAccessLog() {
		p := fmt.Sprintf("%s.access_log[%d]", path, i)
		spec, err := decodeAccessLog(p, al)
		if err != nil {
			return nil, err
		}
		lt.logs = append(lt.logs, spec)
	}
	lt.logsSet = len(m.GetAccessLog()) > 0
	return lt, nil
}

func decodeAccessLog(path string, al *accesslogv3.AccessLog) (accessLogSpec, error) {
	var spec accessLogSpec
	tc := al.GetTypedConfig()
	switch tc.GetTypeUrl() {
	case fileAccessLogType:
	case otelAccessLogType:
		return decodeOTelAccessLog(path, al)
	default:
		return spec, fieldErr(path, "%q: %v (%s, to the gateway's --access-log-file; open_telemetry, to its --access-log-otlp-endpoint)", tc.GetTypeUrl(), errUnsupported, fileAccessLogName)
	}
	fl := new(filev3.FileAccessLog)
	if err := tc.UnmarshalTo(fl); err != nil {
		return spec, fieldErr(path+".typed_config", "%v", err)
	}
	sf := fl.GetLogFormat()
	if sf == nil {
		return spec, fieldErr(path+".typed_config.log_format", "required: Istio's default text or JSON format")
	}
	switch f := sf.GetFormat().(type) {
	case *corev3.SubstitutionFormatString_TextFormatSource:
		if f.TextFormatSource.GetInlineString() != accesslog.TextFormat {
			return spec, fieldErr(path+".typed_config.log_format.text_format_source", "%v: only Istio's default text format", errUnsupported)
		}
		spec.enc = accesslog.Text
	case *corev3.SubstitutionFormatString_JsonFormat:
		fs := f.JsonFormat.GetFields()
		ok := len(fs) == len(accesslog.JSONFormat)
		for k, v := range accesslog.JSONFormat {
			ok = ok && fs[k].GetStringValue() == v
		}
		if !ok {
			return spec, fieldErr(path+".typed_config.log_format.json_format", "%v: only Istio's default JSON format", errUnsupported)
		}
		spec.enc = accesslog.JSON
	default:
		return spec, fieldErr(path+".typed_config.log_format", "%T: %v", f, errUnsupported)
	}
	return withLogFilter(path, al, spec)
}

// decodeOTelAccessLog reads Envoy's OpenTelemetry access logger as Istio
// writes its envoyOtelAls providers: records with Istio's text format as
// their body, sent to the gateway's own collector (--access-log-otlp-*),
// whatever cluster the config names for Envoy.
func decodeOTelAccessLog(path string, al *accesslogv3.AccessLog) (accessLogSpec, error) {
	spec := accessLogSpec{enc: accesslog.OTel}
	oc := new(otelalsv3.OpenTelemetryAccessLogConfig)
	if err := al.GetTypedConfig().UnmarshalTo(oc); err != nil {
		return spec, fieldErr(path+".typed_config", "%v", err)
	}
	if body := oc.GetBody(); body.GetStringValue() != accesslog.TextFormat {
		return spec, fieldErr(path+".typed_config.body", "%v: only Istio's default text format as a string", errUnsupported)
	}
	if len(oc.GetAttributes().GetValues()) > 0 {
		return spec, fieldErr(path+".typed_config.attributes", "%v", errUnsupported)
	}
	return withLogFilter(path, al, spec)
}

// withLogFilter is spec with al's filter.
func withLogFilter(path string, al *accesslogv3.AccessLog, spec accessLogSpec) (accessLogSpec, error) {
	if al.GetFilter() != nil {
		p, err := decodeLogPred(path+".filter", al.GetFilter(), 0)
		if err != nil {
			return spec, err
		}
		spec.filter = p
	}
	return spec, nil
}

func decodeLogPred(path string, f *accesslogv3.AccessLogFilter, depth int) (*logPred, error) {
	if depth > 8 {
		return nil, fieldErr(path, "nested deeper than 8")
	}
	cmp := func(kind uint8, c *accesslogv3.ComparisonFilter) (*logPred, error) {
		switch c.GetOp() {
		case accesslogv3.ComparisonFilter_EQ, accesslogv3.ComparisonFilter_GE, accesslogv3.ComparisonFilter_LE:
		default:
			return nil, fieldErr(path+".comparison.op", "%v: %v", c.GetOp(), errUnsupported)
		}
		return &logPred{kind: kind, op: c.GetOp(), value: int64(c.GetValue().GetDefaultValue())}, nil
	}
	var subs []*accesslogv3.AccessLogFilter
	kind := predAnd
	switch s := f.GetFilterSpecifier().(type) {
	case *accesslogv3.AccessLogFilter_StatusCodeFilter:
		return cmp(predStatus, s.StatusCodeFilter.GetComparison())
	case *accesslogv3.AccessLogFilter_DurationFilter:
		return cmp(predDuration, s.DurationFilter.GetComparison())
	case *accesslogv3.AccessLogFilter_AndFilter:
		subs = s.AndFilter.GetFilters()
	case *accesslogv3.AccessLogFilter_OrFilter:
		subs, kind = s.OrFilter.GetFilters(), predOr
	default:
		return nil, fieldErr(path, "%T: %v (status_code_filter, duration_filter, and_filter, or_filter)", s, errUnsupported)
	}
	if len(subs) < 2 {
		return nil, fieldErr(path, "want 2 or more filters, got %d", len(subs))
	}
	p := &logPred{kind: kind}
	for i, sf := range subs {
		sp, err := decodeLogPred(fmt.Sprintf("%s.filters[%d]", path, i), sf, depth+1)
		if err != nil {
			return nil, err
		}
		p.subs = append(p.subs, sp)
	}
	return p, nil
}

// effectiveTracing is the tracing of a table whose listener says lt: the
// gateway's (nil: no exporter, so no tracing whatever the listener says),
// with the listener's sampling, reporting and tags over it.
func effectiveTracing(base *Tracing, lt *listenerTelemetry) *Tracing {
	if base == nil || lt == nil || lt.tracing == nil {
		return base
	}
	o := lt.tracing
	t := *base
	if o.hasSampling {
		if s, err := trace.NewSampler(o.sampling/100, base.Sampler.KeepErrors); err == nil {
			t.Sampler = s
		}
	}
	t.noReport = !o.report
	t.tags = o.tags
	return &t
}

// effectiveLogs is the access logs of a table whose listener says lt:
// the listener's when it names any, else the flags' (every call, in
// --access-log's encoding); none without an access log writer.
func effectiveLogs(al *AccessLog, lt *listenerTelemetry) []accessLogSpec {
	if al == nil || al.Sink == nil {
		return nil
	}
	if lt != nil && lt.logsSet {
		if al.OTel != nil {
			return lt.logs
		}
		// No collector (--access-log-otlp-endpoint): the otel provider's
		// logs are left out here, once, not skipped on every call.
		var logs []accessLogSpec
		for _, l := range lt.logs {
			if l.enc != accesslog.OTel {
				logs = append(logs, l)
			}
		}
		return logs
	}
	if al.All {
		return []accessLogSpec{{enc: al.Encoding}}
	}
	return nil
}
