package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	envoytype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// hcKind is the protocol of an active health check.
type hcKind uint8

const (
	hcHTTP hcKind = iota + 1
	hcTCP
	hcGRPC
)

func (k hcKind) String() string {
	switch k {
	case hcHTTP:
		return "http"
	case hcTCP:
		return "tcp"
	}
	return "grpc"
}

// healthCheckSpec is a decoded core.HealthCheck (a cluster's
// health_checks[0]). Comparable with reflect.DeepEqual: a cluster whose
// check did not change keeps its checker and the state it learned.
type healthCheckSpec struct {
	kind    hcKind
	timeout time.Duration
	// interval between the end of a check and the start of the next.
	interval       time.Duration
	initialJitter  time.Duration
	intervalJitter time.Duration
	jitterPercent  uint32
	// Consecutive results that change a host's state (Envoy's thresholds;
	// 0 is read as 1).
	unhealthyThreshold, healthyThreshold uint32
	// Envoy's special intervals; 0 falls back as Envoy's do (interval.go).
	noTraffic, noTrafficHealthy, unhealthy, unhealthyEdge, healthyEdge time.Duration

	// HTTP.
	path, host, method string
	headers            [][2]string // request_headers_to_add, in order
	remove             []string    // request_headers_to_remove
	expected           [][2]int64  // [start, end): healthy statuses
	retriable          [][2]int64  // [start, end): failures that count towards the threshold
	// gRPC.
	service string
}

// defaultNoTrafficInterval is Envoy's no_traffic_interval default.
const defaultNoTrafficInterval = 60 * time.Second

// decodeHealthChecks reads a cluster's health_checks. The gateway runs one
// check per cluster; what it cannot run is refused (NACK naming the field),
// never silently skipped: an endpoint would otherwise look checked.
func decodeHealthChecks(hcs []*core.HealthCheck) (*healthCheckSpec, error) {
	if len(hcs) == 0 {
		return nil, nil
	}
	if len(hcs) > 1 {
		return nil, fieldErr("health_checks", "%d health checks: the gateway runs one per cluster", len(hcs))
	}
	hc := hcs[0]
	const p = "health_checks[0]"
	s := &healthCheckSpec{jitterPercent: hc.GetIntervalJitterPercent()}
	var err error
	req := func(name string, d interface {
		AsDuration() time.Duration
		CheckValid() error
	}, isNil bool, dst *time.Duration, required bool) {
		if err != nil {
			return
		}
		if isNil {
			if required {
				err = fieldErr(p+"."+name, "required")
			}
			return
		}
		if e := d.CheckValid(); e != nil {
			err = fieldErr(p+"."+name, "%v", e)
			return
		}
		v := d.AsDuration()
		if v < 0 || required && v <= 0 {
			err = fieldErr(p+"."+name, "%v: must be more than 0", v)
			return
		}
		*dst = v
	}
	req("timeout", hc.GetTimeout(), hc.GetTimeout() == nil, &s.timeout, true)
	req("interval", hc.GetInterval(), hc.GetInterval() == nil, &s.interval, true)
	req("initial_jitter", hc.GetInitialJitter(), hc.GetInitialJitter() == nil, &s.initialJitter, false)
	req("interval_jitter", hc.GetIntervalJitter(), hc.GetIntervalJitter() == nil, &s.intervalJitter, false)
	req("no_traffic_interval", hc.GetNoTrafficInterval(), hc.GetNoTrafficInterval() == nil, &s.noTraffic, false)
	req("no_traffic_healthy_interval", hc.GetNoTrafficHealthyInterval(), hc.GetNoTrafficHealthyInterval() == nil, &s.noTrafficHealthy, false)
	req("unhealthy_interval", hc.GetUnhealthyInterval(), hc.GetUnhealthyInterval() == nil, &s.unhealthy, false)
	req("unhealthy_edge_interval", hc.GetUnhealthyEdgeInterval(), hc.GetUnhealthyEdgeInterval() == nil, &s.unhealthyEdge, false)
	req("healthy_edge_interval", hc.GetHealthyEdgeInterval(), hc.GetHealthyEdgeInterval() == nil, &s.healthyEdge, false)
	if err != nil {
		return nil, err
	}
	if s.noTraffic == 0 {
		s.noTraffic = defaultNoTrafficInterval
	}
	if hc.GetUnhealthyThreshold() == nil {
		return nil, fieldErr(p+".unhealthy_threshold", "required")
	}
	if hc.GetHealthyThreshold() == nil {
		return nil, fieldErr(p+".healthy_threshold", "required")
	}
	s.unhealthyThreshold = max(hc.GetUnhealthyThreshold().GetValue(), 1)
	s.healthyThreshold = max(hc.GetHealthyThreshold().GetValue(), 1)
	if s.jitterPercent > 100 {
		return nil, fieldErr(p+".interval_jitter_percent", "%d above 100", s.jitterPercent)
	}
	switch {
	case hc.GetAltPort() != nil:
		return nil, fieldErr(p+".alt_port", "not supported by the gateway (checks go to the endpoint's own port)")
	case hc.GetReuseConnection() != nil && !hc.GetReuseConnection().GetValue():
		return nil, fieldErr(p+".reuse_connection", "false is not supported by the gateway (checks keep their connections)")
	case hc.GetEventLogPath() != "" || len(hc.GetEventLogger()) > 0 || hc.GetEventService() != nil:
		return nil, fieldErr(p+".event_logger", "health check event logs are not supported by the gateway (see /v1/clusters and /metrics)")
	case hc.GetTlsOptions() != nil:
		return nil, fieldErr(p+".tls_options", "not supported by the gateway")
	case hc.GetTransportSocketMatchCriteria() != nil:
		return nil, fieldErr(p+".transport_socket_match_criteria", "not supported by the gateway")
	}
	switch c := hc.GetHealthChecker().(type) {
	case *core.HealthCheck_HttpHealthCheck_:
		return s, decodeHTTPCheck(c.HttpHealthCheck, p+".http_health_check", s)
	case *core.HealthCheck_TcpHealthCheck_:
		s.kind = hcTCP
		t := c.TcpHealthCheck
		if t.GetSend() != nil || len(t.GetReceive()) > 0 || t.GetProxyProtocolConfig() != nil {
			return nil, fieldErr(p+".tcp_health_check", "only a connect check (no send, receive or proxy_protocol_config) is supported by the gateway")
		}
		return s, nil
	case *core.HealthCheck_GrpcHealthCheck_:
		s.kind = hcGRPC
		g := c.GrpcHealthCheck
		s.service = g.GetServiceName()
		if g.GetAuthority() != "" {
			return nil, fieldErr(p+".grpc_health_check.authority", "not supported by the gateway (the check's authority is the endpoint's address)")
		}
		if len(g.GetInitialMetadata()) > 0 {
			return nil, fieldErr(p+".grpc_health_check.initial_metadata", "not supported by the gateway")
		}
		return s, nil
	case *core.HealthCheck_CustomHealthCheck_:
		return nil, fieldErr(p+".custom_health_check", "not supported by the gateway (http, tcp, grpc)")
	default:
		return nil, fieldErr(p+".health_checker", "required: http_health_check, tcp_health_check or grpc_health_check")
	}
}

func decodeHTTPCheck(h *core.HealthCheck_HttpHealthCheck, p string, s *healthCheckSpec) error {
	s.kind = hcHTTP
	s.path, s.host = h.GetPath(), h.GetHost()
	if s.path == "" || s.path[0] != '/' {
		return fieldErr(p+".path", "%q: want an absolute path", s.path)
	}
	if strings.ContainsAny(s.path, " \r\n\t") {
		return fieldErr(p+".path", "%q: contains white space", s.path)
	}
	if s.host != "" && !validHostHeader(s.host) {
		return fieldErr(p+".host", "%q is not a valid Host header", s.host)
	}
	switch {
	case h.GetSend() != nil || h.GetReceive() != nil:
		return fieldErr(p+".send", "payload checks are not supported by the gateway (the status decides)")
	case h.GetCodecClientType() != envoytype.CodecClientType_HTTP1:
		return fieldErr(p+".codec_client_type", "%v: only HTTP1 is supported by the gateway (for HTTP/2 endpoints use grpc_health_check)", h.GetCodecClientType())
	case h.GetServiceNameMatcher() != nil:
		return fieldErr(p+".service_name_matcher", "not supported by the gateway")
	case h.GetUseAlpnProtocol():
		return fieldErr(p+".use_alpn_protocol", "not supported by the gateway")
	}
	switch m := h.GetMethod(); m {
	case core.RequestMethod_METHOD_UNSPECIFIED, core.RequestMethod_GET:
		s.method = http.MethodGet
	case core.RequestMethod_HEAD, core.RequestMethod_POST, core.RequestMethod_PUT, core.RequestMethod_DELETE,
		core.RequestMethod_OPTIONS, core.RequestMethod_TRACE, core.RequestMethod_PATCH:
		s.method = m.String()
	default:
		return fieldErr(p+".method", "%v is not allowed for a health check", m)
	}
	for i, o := range h.GetRequestHeadersToAdd() {
		hv := o.GetHeader()
		k := hv.GetKey()
		v := hv.GetValue()
		if len(hv.GetRawValue()) > 0 {
			v = string(hv.GetRawValue())
		}
		if !validHeaderName(k) || strings.HasPrefix(k, ":") {
			return fieldErr(fmt.Sprintf("%s.request_headers_to_add[%d].header.key", p, i), "%q is not a header name", k)
		}
		if !validHeaderValue(v) {
			return fieldErr(fmt.Sprintf("%s.request_headers_to_add[%d].header.value", p, i), "not a valid header value")
		}
		if strings.EqualFold(k, "host") {
			return fieldErr(fmt.Sprintf("%s.request_headers_to_add[%d].header.key", p, i), "set the Host header with host")
		}
		s.headers = append(s.headers, [2]string{k, v})
	}
	for i, k := range h.GetRequestHeadersToRemove() {
		if !validHeaderName(k) {
			return fieldErr(fmt.Sprintf("%s.request_headers_to_remove[%d]", p, i), "%q is not a header name", k)
		}
		s.remove = append(s.remove, k)
	}
	var err error
	if s.expected, err = statusRanges(h.GetExpectedStatuses(), p+".expected_statuses"); err != nil {
		return err
	}
	if len(s.expected) == 0 {
		s.expected = [][2]int64{{200, 201}} // Envoy's default: 200 only
	}
	s.retriable, err = statusRanges(h.GetRetriableStatuses(), p+".retriable_statuses")
	return err
}

// statusRanges checks Envoy's Int64Range statuses: [start, end) within
// [100, 600).
func statusRanges(rs []*envoytype.Int64Range, p string) ([][2]int64, error) {
	var out [][2]int64
	for i, r := range rs {
		if r.GetStart() < 100 || r.GetEnd() > 600 || r.GetStart() >= r.GetEnd() {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", p, i), "[%d, %d): want 100 <= start < end <= 600", r.GetStart(), r.GetEnd())
		}
		out = append(out, [2]int64{r.GetStart(), r.GetEnd()})
	}
	return out, nil
}

func inRanges(rs [][2]int64, code int) bool {
	for _, r := range rs {
		if int64(code) >= r[0] && int64(code) < r[1] {
			return true
		}
	}
	return false
}

// describe is the check as /v1/clusters shows it.
func (s *healthCheckSpec) describe() string {
	var what string
	switch s.kind {
	case hcHTTP:
		what = fmt.Sprintf("http %s %s", s.method, s.path)
	case hcTCP:
		what = "tcp connect"
	case hcGRPC:
		what = fmt.Sprintf("grpc health %q", s.service)
	}
	return fmt.Sprintf("%s every %v (timeout %v, unhealthy after %d, healthy after %d)", what, s.interval, s.timeout, s.unhealthyThreshold, s.healthyThreshold)
}

// validHostHeader: a host name or address with an optional port, as the
// checks' Host header (no path, user info or white space).
func validHostHeader(h string) bool {
	for _, c := range []byte(h) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("/?#@\\\"<>", c) >= 0 {
			return false
		}
	}
	return h != ""
}

// validHeaderName: an RFC 9110 token.
func validHeaderName(k string) bool {
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return k != ""
}

// validHeaderValue: visible characters, spaces and tabs only.
func validHeaderValue(v string) bool {
	for _, c := range []byte(v) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
