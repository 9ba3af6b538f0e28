package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	telemetry "istio.io/api/telemetry/v1alpha1"
)

// TelemetryGroup is the API group of the Telemetry kind; Encode writes it
// as TelemetryGroup/v1 (Decode also accepts v1alpha1, the same schema).
const TelemetryGroup = "telemetry.istio.io"

// KindTelemetry is Istio's Telemetry kind: tracing and access logging
// of the workloads it selects (docs/telemetry.md).
const KindTelemetry = "Telemetry"

// The providers a Telemetry may name: Sextant's stand-ins for the
// extensionProviders of Istio's MeshConfig, which Sextant does not have.
const (
	// ProviderOTel is the gateway's OTLP span exporter (--tracing-*),
	// named as Istio's OpenTelemetry task names its provider.
	ProviderOTel = "otel-tracing"
	// ProviderEnvoy writes access logs in Envoy's (Istio's) default text
	// format, as Istio's built-in "envoy" provider; ProviderEnvoyJSON in
	// Istio's default JSON format. Both go to the gateway's access log
	// (--access-log-file, stdout by default).
	ProviderEnvoy     = "envoy"
	ProviderEnvoyJSON = "envoy-json"
	// ProviderOTelLogs sends access logs as OTLP log records, each line
	// in Envoy's text format a record's body, to the gateway's
	// --access-log-otlp-endpoint: Istio's "otel" provider (an
	// envoyOtelAls extension provider, as Istio's samples name it).
	ProviderOTelLogs = "otel"
)

func validateTelemetry(c errs, path string, o *Object) {
	t := o.Telemetry
	validateSelector(c, join(path, "selector.matchLabels"), t.GetSelector().GetMatchLabels())
	if len(t.Tracing) > 1 {
		c.add(join(path, "tracing"), ErrNotSupported, "%d entries: one is supported (several need match, which is not supported)", len(t.Tracing))
	}
	for i, tr := range t.Tracing {
		p := index(join(path, "tracing"), i)
		if tr == nil {
			c.add(p, ErrInvalid, "want an object, got null")
			continue
		}
		for j, pr := range tr.Providers {
			if name := pr.GetName(); name != ProviderOTel {
				c.add(join(index(join(p, "providers"), j), "name"), ErrInvalid, "%q: not a tracing provider (Sextant has one: %q, the gateway's OTLP exporter)", name, ProviderOTel)
			}
		}
		if s := tr.GetRandomSamplingPercentage(); s != nil && (s.Value < 0 || s.Value > 100) {
			c.add(join(p, "randomSamplingPercentage"), ErrInvalid, "%v: want a percentage, 0 to 100", s.Value)
		}
		for _, k := range slices.Sorted(maps.Keys(tr.CustomTags)) {
			tp := mapKey(join(p, "customTags"), k)
			tag := tr.CustomTags[k]
			if k == "" || len(k) > 256 {
				c.add(tp, ErrInvalid, "a tag name is 1..256 bytes")
			}
			switch {
			case tag == nil || tag.Type == nil:
				c.add(tp, ErrInvalid, "want one of literal, header, environment")
			case tag.GetLiteral() != nil:
			case tag.GetHeader() != nil:
				if n := tag.GetHeader().Name; n == "" || strings.ContainsAny(n, " \t:\r\n") {
					c.add(join(tp, "header.name"), ErrInvalid, "%q: want a header name", n)
				}
			case tag.GetEnvironment() != nil:
				if tag.GetEnvironment().Name == "" {
					c.add(join(tp, "environment.name"), ErrInvalid, "required")
				}
			}
		}
	}
	for i, al := range t.AccessLogging {
		p := index(join(path, "accessLogging"), i)
		if al == nil {
			c.add(p, ErrInvalid, "want an object, got null")
			continue
		}
		for j, pr := range al.Providers {
			if name := pr.GetName(); name != ProviderEnvoy && name != ProviderEnvoyJSON && name != ProviderOTelLogs {
				c.add(join(index(join(p, "providers"), j), "name"), ErrInvalid, "%q: not an access log provider (Sextant has %q, Envoy's text format, %q, Istio's JSON format, and %q, OTLP log records to the gateway's collector)", name, ProviderEnvoy, ProviderEnvoyJSON, ProviderOTelLogs)
			}
		}
		if f := al.GetFilter(); f != nil {
			if _, err := ParseLogFilter(f.Expression); err != nil {
				c.add(join(p, "filter.expression"), ErrNotSupported, "%v", err)
			}
		}
	}
}

// TracingPolicy is the tracing a workload's Telemetries resolve to; the
// zero value (Set false) means no Telemetry configures tracing: the
// gateway's flags decide.
type TracingPolicy struct {
	Set bool
	// Providers named (none: the default, ProviderOTel).
	Providers []string
	// Sampling is the sampled percentage of new traces when HasSampling.
	Sampling    float64
	HasSampling bool
	// DisableSpanReporting: spans are not exported (context still
	// propagates).
	DisableSpanReporting bool
	// CustomTags are added to every span, by tag name.
	CustomTags map[string]*telemetry.Tracing_CustomTag
}

// AccessLogPolicy is one access log a workload's Telemetries turn on: a
// provider and the filter a call must pass (nil: every call).
type AccessLogPolicy struct {
	Provider string
	Filter   *LogFilter
}

// TelemetryPolicy is everything Telemetry resolves to for one workload.
type TelemetryPolicy struct {
	Tracing    TracingPolicy
	AccessLogs []AccessLogPolicy // by provider name
}

// Telemetries is an immutable view of the Telemetry objects in force.
type Telemetries struct {
	root string
	objs []*Object // key order
}

// NewTelemetries returns the view over objs (other kinds are ignored), with
// root the mesh's root namespace ("" for DefaultRootNamespace).
func NewTelemetries(root string, objs []*Object) *Telemetries {
	if root == "" {
		root = DefaultRootNamespace
	}
	t := &Telemetries{root: root}
	for _, o := range objs {
		if o.Telemetry != nil {
			t.objs = append(t.objs, o)
		}
	}
	slices.SortFunc(t.objs, func(a, b *Object) int { return a.Key.Compare(b.Key) })
	return t
}

// Root is the root namespace.
func (t *Telemetries) Root() string { return t.root }

// For resolves the Telemetry of workload w as Istio does: the mesh's (the
// root namespace's, without a selector), then w's namespace's (without a
// selector), then the one selecting w in its namespace; each level
// overrides what it sets of the one before. Of two at one level the first
// by name counts (Istio: the oldest). Tracing: providers, sampling and
// disableSpanReporting override one by one; customTags replace the
// parent's whole. Access logging: each entry turns its providers (none:
// ProviderEnvoy) on with its filter (none: the inherited filter), or off
// when disabled.
func (t *Telemetries) For(w Workload) TelemetryPolicy {
	var mesh, namespace, workload *Object
	for _, o := range t.objs {
		sel := o.Telemetry.GetSelector().GetMatchLabels()
		switch {
		case len(sel) > 0 && o.Namespace == w.Namespace && selectsLabels(sel, w):
			if workload == nil {
				workload = o
			}
		case len(sel) == 0 && o.Namespace == w.Namespace && w.Namespace != t.root:
			if namespace == nil {
				namespace = o
			}
		case len(sel) == 0 && o.Namespace == t.root:
			if mesh == nil {
				mesh = o
			}
		}
	}
	var out TelemetryPolicy
	logs := map[string]*LogFilter{}
	on := map[string]bool{}
	for _, o := range []*Object{mesh, namespace, workload} {
		if o == nil {
			continue
		}
		if len(o.Telemetry.Tracing) > 0 {
			tr := o.Telemetry.Tracing[0]
			tp := &out.Tracing
			tp.Set = true
			if len(tr.Providers) > 0 {
				tp.Providers = nil
				for _, p := range tr.Providers {
					tp.Providers = append(tp.Providers, p.GetName())
				}
			}
			if s := tr.GetRandomSamplingPercentage(); s != nil {
				tp.Sampling, tp.HasSampling = s.Value, true
			}
			if d := tr.GetDisableSpanReporting(); d != nil {
				tp.DisableSpanReporting = d.Value
			}
			if tr.CustomTags != nil {
				tp.CustomTags = tr.CustomTags
			}
		}
		for _, al := range o.Telemetry.AccessLogging {
			names := []string{ProviderEnvoy}
			if len(al.Providers) > 0 {
				names = names[:0]
				for _, p := range al.Providers {
					names = append(names, p.GetName())
				}
			}
			for _, n := range names {
				if al.GetDisabled().GetValue() {
					on[n] = false
					continue
				}
				on[n] = true
				if e := al.GetFilter().GetExpression(); e != "" {
					if f, err := ParseLogFilter(e); err == nil { // validated at apply
						logs[n] = f
					}
				}
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(on)) {
		if on[n] {
			out.AccessLogs = append(out.AccessLogs, AccessLogPolicy{Provider: n, Filter: logs[n]})
		}
	}
	return out
}

func selectsLabels(sel map[string]string, w Workload) bool {
	for k, v := range sel {
		if got, ok := w.Labels.Get(k); !ok || got != v {
			return false
		}
	}
	return true
}

// String describes p for logs and tests.
func (p TelemetryPolicy) String() string {
	var b strings.Builder
	if p.Tracing.Set {
		fmt.Fprintf(&b, "tracing{providers=%v", p.Tracing.Providers)
		if p.Tracing.HasSampling {
			fmt.Fprintf(&b, " sampling=%v", p.Tracing.Sampling)
		}
		if p.Tracing.DisableSpanReporting {
			b.WriteString(" no-reporting")
		}
		for _, k := range slices.Sorted(maps.Keys(p.Tracing.CustomTags)) {
			fmt.Fprintf(&b, " tag:%s", k)
		}
		b.WriteString("} ")
	}
	for _, l := range p.AccessLogs {
		b.WriteString("log{" + l.Provider)
		if l.Filter != nil {
			b.WriteString(" " + l.Filter.String())
		}
		b.WriteString("} ")
	}
	return strings.TrimSpace(b.String())
}
