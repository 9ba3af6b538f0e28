package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// AnnotationHealthCheck asks the data plane (the gateway, Envoy) to check
// the endpoints of a DestinationRule's clusters itself (a cluster's
// health_checks), since Istio has no field for it. Its value is a small
// JSON or YAML object (docs/gateway.md, "Active health checks"):
//
//	sextant.io/health-check: '{"http": {"path": "/healthz"}, "interval": "5s", "unhealthy_threshold": 2}'
const AnnotationHealthCheck = "sextant.io/health-check"

// HealthCheck is the decoded AnnotationHealthCheck: one of HTTP, TCP or
// GRPC, and the timing all share.
type HealthCheck struct {
	HTTP *HTTPHealthCheck
	TCP  bool // a connect
	GRPC *GRPCHealthCheck

	Interval              time.Duration // default 10s
	Timeout               time.Duration // default 1s
	HealthyThreshold      uint32        // default 2
	UnhealthyThreshold    uint32        // default 3
	IntervalJitter        time.Duration
	IntervalJitterPercent uint32
	NoTrafficInterval     time.Duration // 0: the data plane's default (Envoy: 60s)
}

// HTTPHealthCheck is an HTTP check: an expected answer to a GET of Path.
type HTTPHealthCheck struct {
	Path string
	// Host is the Host header; default the DestinationRule's host.
	Host string
	// ExpectedStatuses: default 200 only, as Envoy.
	ExpectedStatuses []StatusRange
	Headers          map[string]string
}

// GRPCHealthCheck is a grpc.health.v1 Check of Service ("": the server).
type GRPCHealthCheck struct {
	Service string
}

// healthCheckJSON is the annotation as written.
type healthCheckJSON struct {
	HTTP *struct {
		Path             string            `json:"path"`
		Host             string            `json:"host"`
		ExpectedStatuses []json.RawMessage `json:"expected_statuses"` // 200 or "200-299"
		Headers          map[string]string `json:"headers"`
	} `json:"http"`
	TCP  *struct{} `json:"tcp"`
	GRPC *struct {
		Service string `json:"service_name"`
	} `json:"grpc"`
	Interval              string  `json:"interval"`
	Timeout               string  `json:"timeout"`
	HealthyThreshold      *uint32 `json:"healthy_threshold"`
	UnhealthyThreshold    *uint32 `json:"unhealthy_threshold"`
	IntervalJitter        string  `json:"interval_jitter"`
	IntervalJitterPercent uint32  `json:"interval_jitter_percent"`
	NoTrafficInterval     string  `json:"no_traffic_interval"`
}

// Health-check defaults (Envoy has none: these are the annotation's).
const (
	DefaultHealthCheckInterval  = 10 * time.Second
	DefaultHealthCheckTimeout   = time.Second
	DefaultHealthyThreshold     = 2
	DefaultUnhealthyThreshold   = 3
	maxHealthCheckInterval      = 24 * time.Hour
	minHealthCheckInterval      = 100 * time.Millisecond
	maxHealthCheckAnnotationLen = 4096
)

// StatusRange is an inclusive range of HTTP status codes.
type StatusRange struct{ First, Last int }

var statusRangeRE = regexp.MustCompile(`^([0-9]{3})(?:-([0-9]{3}))?$`)

// parseStatusRange reads 200 or "200-299".
func parseStatusRange(b []byte) (StatusRange, error) {
	var r StatusRange
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	m := statusRangeRE.FindStringSubmatch(s)
	if m == nil {
		return r, fmt.Errorf("%s: want a status (200) or a range (\"200-299\")", b)
	}
	r.First, _ = strconv.Atoi(m[1])
	r.Last = r.First
	if m[2] != "" {
		r.Last, _ = strconv.Atoi(m[2])
	}
	if r.First < 100 || r.Last > 599 || r.First > r.Last {
		return r, fmt.Errorf("%s: want statuses within 100-599, first <= last", b)
	}
	return r, nil
}

// HealthCheckError names the field of the annotation that is wrong.
type HealthCheckError struct {
	Field string // "interval", "http.path"; "" for the whole value
	Msg   string
}

func (e *HealthCheckError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

var unknownFieldRE = regexp.MustCompile(`unknown field "([^"]+)"`)

// ParseHealthCheck decodes and checks an AnnotationHealthCheck value,
// filling defaults. Errors are *HealthCheckError.
func ParseHealthCheck(v string) (*HealthCheck, error) {
	bad := func(field, format string, args ...any) error {
		return &HealthCheckError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if len(v) > maxHealthCheckAnnotationLen {
		return nil, bad("", "%d bytes, at most %d", len(v), maxHealthCheckAnnotationLen)
	}
	j, err := yaml.YAMLToJSON([]byte(v))
	if err != nil {
		return nil, bad("", "not JSON or YAML: %v", err)
	}
	var in healthCheckJSON
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return nil, bad(te.Field, "want a %v", te.Type)
		case unknownFieldRE.MatchString(err.Error()):
			return nil, bad(unknownFieldRE.FindStringSubmatch(err.Error())[1], "unknown field")
		}
		return nil, bad("", "%v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.Decode(new(json.RawMessage)) != io.EOF || bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
		return nil, bad("", "want one object")
	}
	n := 0
	for _, set := range []bool{in.HTTP != nil, in.TCP != nil, in.GRPC != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, bad("", "want exactly one of http, tcp, grpc")
	}
	hc := &HealthCheck{TCP: in.TCP != nil, IntervalJitterPercent: in.IntervalJitterPercent,
		Interval: DefaultHealthCheckInterval, Timeout: DefaultHealthCheckTimeout,
		HealthyThreshold: DefaultHealthyThreshold, UnhealthyThreshold: DefaultUnhealthyThreshold}
	if g := in.GRPC; g != nil {
		hc.GRPC = &GRPCHealthCheck{Service: g.Service}
	}
	if h := in.HTTP; h != nil {
		if !strings.HasPrefix(h.Path, "/") || strings.ContainsAny(h.Path, " \t\r\n") {
			return nil, bad("http.path", "%q: want an absolute path", h.Path)
		}
		if h.Host != "" && strings.ContainsAny(h.Host, " \t\r\n/?#@") {
			return nil, bad("http.host", "%q is not a host name", h.Host)
		}
		for k, v := range h.Headers {
			if !headerName.MatchString(k) || strings.EqualFold(k, "host") {
				return nil, bad("http.headers["+k+"]", "not a header name (the Host header is http.host)")
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, bad("http.headers["+k+"]", "not a header value")
			}
		}
		hc.HTTP = &HTTPHealthCheck{Path: h.Path, Host: h.Host, Headers: h.Headers}
		for i, raw := range h.ExpectedStatuses {
			r, err := parseStatusRange(raw)
			if err != nil {
				return nil, bad(fmt.Sprintf("http.expected_statuses[%d]", i), "%v", err)
			}
			hc.HTTP.ExpectedStatuses = append(hc.HTTP.ExpectedStatuses, r)
		}
	}
	for _, d := range []struct {
		name     string
		in       string
		dst      *time.Duration
		min, max time.Duration
	}{
		{"interval", in.Interval, &hc.Interval, minHealthCheckInterval, maxHealthCheckInterval},
		{"timeout", in.Timeout, &hc.Timeout, time.Millisecond, 5 * time.Minute},
		{"interval_jitter", in.IntervalJitter, &hc.IntervalJitter, 0, maxHealthCheckInterval},
		{"no_traffic_interval", in.NoTrafficInterval, &hc.NoTrafficInterval, minHealthCheckInterval, maxHealthCheckInterval},
	} {
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil {
			return nil, bad(d.name, "%q: want a duration such as \"5s\"", d.in)
		}
		if v < d.min || v > d.max {
			return nil, bad(d.name, "%v: want %v..%v", v, d.min, d.max)
		}
		*d.dst = v
	}
	if hc.IntervalJitterPercent > 100 {
		return nil, bad("interval_jitter_percent", "%d: want 0..100", hc.IntervalJitterPercent)
	}
	for _, t := range []struct {
		name string
		in   *uint32
		dst  *uint32
	}{{"healthy_threshold", in.HealthyThreshold, &hc.HealthyThreshold}, {"unhealthy_threshold", in.UnhealthyThreshold, &hc.UnhealthyThreshold}} {
		if t.in == nil {
			continue
		}
		if *t.in < 1 || *t.in > 1000 {
			return nil, bad(t.name, "%d: want 1..1000", *t.in)
		}
		*t.dst = *t.in
	}
	return hc, nil
}

var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
