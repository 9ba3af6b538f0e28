package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseHealthCheck(t *testing.T) {
	hc, err := ParseHealthCheck(`{"http": {"path": "/healthz", "expected_statuses": [200, "204-299"], "headers": {"x-a": "1"}}, "interval": "2s", "unhealthy_threshold": 2}`)
	if err != nil {
		t.Fatal(err)
	}
	if hc.Interval != 2*time.Second || hc.Timeout != DefaultHealthCheckTimeout ||
		hc.UnhealthyThreshold != 2 || hc.HealthyThreshold != DefaultHealthyThreshold ||
		len(hc.HTTP.ExpectedStatuses) != 2 || hc.HTTP.ExpectedStatuses[1] != (StatusRange{204, 299}) {
		t.Errorf("%+v", hc)
	}
	// YAML, as it reads in a manifest.
	if hc, err := ParseHealthCheck("grpc: {service_name: orders}\ninterval: 1s\n"); err != nil || hc.GRPC.Service != "orders" {
		t.Errorf("yaml: %+v %v", hc, err)
	}
	if hc, err := ParseHealthCheck(`{"tcp": {}}`); err != nil || !hc.TCP {
		t.Errorf("tcp: %+v %v", hc, err)
	}
}

// TestHealthCheckAnnotationErrors: `config apply` refuses a bad annotation
// naming the field inside it.
func TestHealthCheckAnnotationErrors(t *testing.T) {
	for _, tc := range []struct{ value, path, msg string }{
		{`{"http": {"path": "/h"}, "intervl": "1s"}`, "[sextant.io/health-check].intervl", "unknown field"},
		{`{"http": {"path": "/h"}, "interval": "soon"}`, "[sextant.io/health-check].interval", "duration"},
		{`{"http": {"path": "/h"}, "interval": "10ms"}`, "[sextant.io/health-check].interval", "100ms"},
		{`{"http": {"path": "h"}}`, "[sextant.io/health-check].http.path", "absolute path"},
		{`{"http": {"path": "/h", "expected_statuses": ["299-200"]}}`, "[sextant.io/health-check].http.expected_statuses[0]", "first <= last"},
		{`{"http": {"path": "/h", "headers": {"a b": "c"}}}`, "[sextant.io/health-check].http.headers[a b]", "header name"},
		{`{"http": {"path": "/h"}, "unhealthy_threshold": 0}`, "[sextant.io/health-check].unhealthy_threshold", "1..1000"},
		{`{"http": {"path": "/h"}, "healthy_threshold": "x"}`, "[sextant.io/health-check].healthy_threshold", "want a uint32"},
		{`{"http": {"path": "/h"}, "tcp": {}}`, "[sextant.io/health-check]", "exactly one of"},
		{`{}`, "[sextant.io/health-check]", "exactly one of"},
		{`[1`, "[sextant.io/health-check]", "not JSON or YAML"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			in := "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x, annotations: {sextant.io/health-check: '" + tc.value + "'}}\nspec: {host: x}\n"
			_, err := Decode([]byte(in))
			var list Errors
			if !errors.As(err, &list) || len(list) != 1 {
				t.Fatalf("error %v", err)
			}
			e := list[0]
			if e.Path != "metadata.annotations"+tc.path || !errors.Is(e, ErrInvalid) || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got %s: %q, want %s containing %q", e.Path, e.Msg, "metadata.annotations"+tc.path, tc.msg)
			}
		})
	}
}

// FuzzParseHealthCheck: any annotation value is either refused with an
// error or gives a check whose values are in range.
func FuzzParseHealthCheck(f *testing.F) {
	for _, s := range []string{`{"http": {"path": "/healthz", "expected_statuses": [200, "200-299"]}, "interval": "1s"}`,
		"tcp: {}\ntimeout: 2s", `{"grpc": {"service_name": "a"}, "interval_jitter_percent": 5}`, `{"tcp": {}, "healthy_threshold": 0}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		hc, err := ParseHealthCheck(v)
		if err != nil {
			var he *HealthCheckError
			if !errors.As(err, &he) {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		if hc.Interval <= 0 || hc.Timeout <= 0 || hc.HealthyThreshold == 0 || hc.UnhealthyThreshold == 0 || hc.IntervalJitterPercent > 100 {
			t.Fatalf("accepted out of range: %+v", hc)
		}
	})
}
