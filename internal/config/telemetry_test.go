package config

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/label"
)

func TestDecodeTelemetry(t *testing.T) {
	// docs/telemetry.md's example applies as it is.
	if ex, err := os.ReadFile("../../examples/telemetry.yaml"); err != nil {
		t.Fatal(err)
	} else if objs, err := Decode(ex); err != nil || len(objs) != 2 {
		t.Fatalf("examples/telemetry.yaml: %d objects, %v", len(objs), err)
	}
	data, err := os.ReadFile("testdata/telemetry.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 {
		t.Fatalf("got %d objects, want 3", len(objs))
	}
	for _, o := range objs {
		enc := string(o.Encode())
		if !strings.HasPrefix(enc, `{"apiVersion":"telemetry.istio.io/v1","kind":"Telemetry",`) {
			t.Errorf("%s encodes as %s", o.Key, enc)
		}
		back, err := DecodeRecord([]byte(enc))
		if err != nil || string(back.Encode()) != enc {
			t.Errorf("%s: round trip: %v", o.Key, err)
		}
		if k, err := ParseKey(o.Key.String()); err != nil || k != o.Key {
			t.Errorf("ParseKey(%s): %v %v", o.Key, k, err)
		}
	}
}

// TestDecodeTelemetryErrors: every problem names its field; what the
// gateway cannot do is refused, never ignored.
func TestDecodeTelemetryErrors(t *testing.T) {
	const tm = "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: t, namespace: orders}\nspec:\n"
	for _, c := range []struct {
		name, yaml, path string
		err              error
		msg              string
	}{
		{"unknown field", tm + "  tracing: [{randomSamplingPercentag: 5}]\n", "spec.tracing[0].randomSamplingPercentag", ErrUnknownField, `did you mean "randomSamplingPercentage"`},
		{"metrics", tm + "  metrics: [{providers: [{name: prometheus}]}]\n", "spec.metrics", ErrNotSupported, "not supported"},
		{"targetRefs", tm + "  targetRefs: [{kind: Gateway, name: gw}]\n", "spec.targetRefs", ErrNotSupported, "not supported"},
		{"match", tm + "  tracing: [{match: {mode: SERVER}}]\n", "spec.tracing[0].match", ErrNotSupported, "not supported"},
		{"formatter tag", tm + "  tracing: [{customTags: {a: {formatter: {value: '%REQ(x)%'}}}}]\n", "spec.tracing[0].customTags[a].formatter", ErrNotSupported, "not supported"},
		{"two tag types", tm + "  tracing: [{customTags: {a: {literal: {value: x}, header: {name: y}}}}]\n", "spec.tracing[0].customTags[a].literal", ErrInvalid, "only one of"},
		{"empty tag", tm + "  tracing: [{customTags: {a: {}}}]\n", "spec.tracing[0].customTags[a]", ErrInvalid, "literal, header, environment"},
		{"bad header", tm + "  tracing: [{customTags: {a: {header: {name: 'x y'}}}}]\n", "spec.tracing[0].customTags[a].header.name", ErrInvalid, "header name"},
		{"sampling", tm + "  tracing: [{randomSamplingPercentage: 101}]\n", "spec.tracing[0].randomSamplingPercentage", ErrInvalid, "0 to 100"},
		{"two tracing", tm + "  tracing: [{randomSamplingPercentage: 1}, {randomSamplingPercentage: 2}]\n", "spec.tracing", ErrNotSupported, "one is supported"},
		{"tracing provider", tm + "  tracing: [{providers: [{name: zipkin}]}]\n", "spec.tracing[0].providers[0].name", ErrInvalid, `"otel-tracing"`},
		{"log provider", tm + "  accessLogging: [{providers: [{name: stackdriver}]}]\n", "spec.accessLogging[0].providers[0].name", ErrInvalid, `"otel"`},
		{"log match", tm + "  accessLogging: [{match: {mode: CLIENT}}]\n", "spec.accessLogging[0].match", ErrNotSupported, "not supported"},
		{"filter attribute", tm + "  accessLogging: [{filter: {expression: 'request.method == \"GET\"'}}]\n", "spec.accessLogging[0].filter.expression", ErrNotSupported, `attribute "request.method" is not supported`},
		{"filter mixed", tm + "  accessLogging: [{filter: {expression: 'response.code >= 400 && response.code < 500 || response.code == 200'}}]\n", "spec.accessLogging[0].filter.expression", ErrNotSupported, "mixes || and &&"},
		{"filter duration", tm + "  accessLogging: [{filter: {expression: 'response.duration > 500'}}]\n", "spec.accessLogging[0].filter.expression", ErrNotSupported, `duration("500ms")`},
		{"wrong version", "apiVersion: telemetry.istio.io/v1beta1\nkind: Telemetry\nmetadata: {name: t}\nspec: {}\n", "apiVersion", ErrInvalid, "telemetry.istio.io/v1 (v1alpha1 is read as v1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.yaml))
			var list Errors
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("got %v, want field errors", err)
			}
			for _, fe := range list {
				if fe.Path == c.path && errors.Is(fe, c.err) && strings.Contains(fe.Msg, c.msg) {
					return
				}
			}
			t.Fatalf("got %v; want path %q (%v) containing %q", err, c.path, c.err, c.msg)
		})
	}
}

// TestTelemetryResolution: mesh, namespace and workload levels override
// field by field, as Istio merges them.
func TestTelemetryResolution(t *testing.T) {
	data, _ := os.ReadFile("testdata/telemetry.yaml")
	objs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	tm := NewTelemetries("", objs)
	gw := label.FromMap(map[string]string{"istio": "ingressgateway"})
	for _, c := range []struct {
		w    Workload
		want string
	}{
		{Workload{Namespace: "istio-system"}, `tracing{providers=[otel-tracing] sampling=1 tag:cluster} log{envoy response.code >= 400}`},
		{Workload{Namespace: "web"}, `tracing{providers=[otel-tracing] sampling=1 tag:cluster} log{envoy response.code >= 400}`},
		// customTags replace the mesh's whole; sampling overrides.
		{Workload{Namespace: "orders"}, `tracing{providers=[otel-tracing] sampling=100 tag:tenant tag:zone} log{envoy response.code >= 400}`},
		// The selected workload: reporting off, envoy off, envoy-json on.
		{Workload{Namespace: "orders", Labels: gw}, `tracing{providers=[otel-tracing] sampling=100 no-reporting tag:tenant tag:zone} log{envoy-json response.code >= 500 || response.duration > duration("250ms")}`},
		// The selector applies in its namespace only.
		{Workload{Namespace: "web", Labels: gw}, `tracing{providers=[otel-tracing] sampling=1 tag:cluster} log{envoy response.code >= 400}`},
	} {
		if got := tm.For(c.w).String(); got != c.want {
			t.Errorf("%s %v:\n got %s\nwant %s", c.w.Namespace, c.w.Labels, got, c.want)
		}
	}
	if got := NewTelemetries("", nil).For(Workload{Namespace: "a"}).String(); got != "" {
		t.Errorf("no Telemetry: %q", got)
	}
	// An entry without providers turns on the default provider (envoy).
	o, err := Decode([]byte("apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: m, namespace: istio-system}\nspec: {accessLogging: [{}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := NewTelemetries("", o).For(Workload{Namespace: "x"}).String(); got != "log{envoy}" {
		t.Errorf("default provider: %q", got)
	}
}

func TestLogFilter(t *testing.T) {
	for _, c := range []struct {
		expr string
		code int
		d    time.Duration
		want bool
	}{
		{"response.code >= 400", 404, 0, true},
		{"response.code >= 400", 200, 0, false},
		{"response.code != 200", 201, 0, true},
		{"response.code==503", 503, 0, true},
		{`response.duration > duration("500ms")`, 200, 501 * time.Millisecond, true},
		{`response.duration > duration("500ms")`, 200, 500 * time.Millisecond, false},
		{`response.duration >= duration('1s')`, 200, time.Second, true},
		{`response.code >= 500 || response.duration > duration("1s")`, 200, 2 * time.Second, true},
		{`response.code >= 500 || response.duration > duration("1s")`, 200, time.Millisecond, false},
		{"response.code >= 400 && response.code < 500", 503, 0, false},
		{"response.code >= 400 && response.code < 500", 429, 0, true},
	} {
		f, err := ParseLogFilter(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if got := f.Match(c.code, c.d); got != c.want {
			t.Errorf("%s on %d after %v: %v, want %v", c.expr, c.code, c.d, got, c.want)
		}
		back, err := ParseLogFilter(f.String())
		if err != nil || back.String() != f.String() {
			t.Errorf("%s: String %q does not read back: %v", c.expr, f.String(), err)
		}
	}
	for _, bad := range []string{"", "response.code", "response.code >= x", "response.code >= 1000", "(response.code >= 400)",
		`response.duration > duration("1.5ms")`, `response.duration > duration(500ms)`, "size(response.code) > 1", "response.code >= 400 ||"} {
		if _, err := ParseLogFilter(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// FuzzParseLogFilter: no expression panics the parser, and what it
// accepts writes back as an expression that reads the same.
func FuzzParseLogFilter(f *testing.F) {
	for _, s := range []string{"response.code >= 400", `response.duration > duration("500ms")`,
		`response.code >= 500 || response.duration >= duration('2s')`, "response.code >= 400 && response.code < 500"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		lf, err := ParseLogFilter(expr)
		if err != nil {
			return
		}
		back, err := ParseLogFilter(lf.String())
		if err != nil || back.String() != lf.String() {
			t.Fatalf("%q: %q does not read back: %v", expr, lf.String(), err)
		}
	})
}
