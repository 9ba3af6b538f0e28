package config

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	istiotype "istio.io/api/type/v1beta1"
)

// supported lists, per message, the fields Sextant implements (proto field
// names). Every other field Istio defines is refused as "not supported".
// docs/controlplane.md lists the same subset for users.
var supported = map[protoreflect.FullName]map[protoreflect.Name]bool{}

// allow adds fields of m to the supported subset (each field family's file
// allows its own).
func allow(m proto.Message, fields ...protoreflect.Name) {
	md := m.ProtoReflect().Descriptor()
	set := supported[md.FullName()]
	if set == nil {
		set = map[protoreflect.Name]bool{}
	}
	for _, f := range fields {
		if md.Fields().ByName(f) == nil {
			panic(fmt.Sprintf("config: %s has no field %s", md.FullName(), f))
		}
		set[f] = true
	}
	supported[md.FullName()] = set
}

func init() {
	allow(&networking.VirtualService{}, "hosts", "gateways", "http", "tls")
	allow(&networking.TLSRoute{}, "match", "route")
	allow(&networking.TLSMatchAttributes{}, "sni_hosts", "port")
	allow(&networking.RouteDestination{}, "destination", "weight")
	allow(&networking.HTTPRoute{}, "name", "match", "route", "timeout", "retries")
	allow(&networking.HTTPMatchRequest{}, "name", "uri", "headers", "method")
	allow(&networking.StringMatch{}, "exact", "prefix", "regex")
	allow(&networking.HTTPRouteDestination{}, "destination", "weight")
	allow(&networking.Destination{}, "host", "subset", "port")
	allow(&networking.PortSelector{}, "number")
	allow(&networking.HTTPRetry{}, "attempts", "per_try_timeout", "retry_on")

	allow(&networking.DestinationRule{}, "host", "traffic_policy", "subsets")
	allow(&networking.Subset{}, "name", "labels", "traffic_policy")
	allow(&networking.TrafficPolicy{}, "load_balancer", "connection_pool", "outlier_detection", "tls")
	allow(&networking.ClientTLSSettings{}, "mode", "subject_alt_names", "credential_name", "sni", "insecure_skip_verify")
	allow(&networking.LoadBalancerSettings{}, "simple")
	allow(&networking.ConnectionPoolSettings{}, "tcp", "http")
	allow(&networking.ConnectionPoolSettings_TCPSettings{}, "connect_timeout", "idle_timeout")
	allow(&networking.ConnectionPoolSettings_HTTPSettings{}, "idle_timeout", "h2_upgrade_policy")
	allow(&networking.Gateway{}, "servers", "selector")
	allow(&networking.Server{}, "port", "hosts", "tls", "name")
	allow(&networking.Port{}, "number", "protocol", "name")
	allow(&networking.ServerTLSSettings{}, "https_redirect", "mode", "credential_name", "min_protocol_version", "max_protocol_version")
	allow(&networking.OutlierDetection{}, "consecutive_5xx_errors", "consecutive_gateway_errors",
		"interval", "base_ejection_time", "max_ejection_percent")

	// security.istio.io (security.go): what proxyless gRPC's RBAC and the
	// gateway can enforce.
	allow(&istiotype.WorkloadSelector{}, "match_labels")
	allow(&security.PeerAuthentication{}, "selector", "mtls", "port_level_mtls")
	allow(&security.PeerAuthentication_MutualTLS{}, "mode")
	allow(&security.AuthorizationPolicy{}, "selector", "rules", "action")
	allow(&security.Rule{}, "from", "to", "when")
	allow(&security.Rule_From{}, "source")
	allow(&security.Rule_To{}, "operation")
	allow(&security.Source{}, "principals", "not_principals", "namespaces", "not_namespaces", "ip_blocks", "not_ip_blocks",
		"request_principals", "not_request_principals")
	allow(&security.Operation{}, "hosts", "not_hosts", "ports", "not_ports", "methods", "not_methods", "paths", "not_paths")
	allow(&security.Condition{}, "key", "values", "not_values")
	allow(&security.RequestAuthentication{}, "selector", "jwt_rules")
	allow(&security.JWTRule{}, "issuer", "audiences", "jwks_uri", "jwks", "from_headers", "from_params", "from_cookies",
		"output_payload_to_header", "forward_original_token", "output_claim_to_headers", "timeout")
	allow(&security.JWTHeader{}, "name", "prefix")
	allow(&security.ClaimToHeader{}, "header", "claim")

	// telemetry.istio.io (telemetry.go): tracing and access logging.
	allow(&telemetry.Telemetry{}, "selector", "tracing", "access_logging")
	allow(&telemetry.Tracing{}, "providers", "random_sampling_percentage", "disable_span_reporting", "custom_tags")
	allow(&telemetry.ProviderRef{}, "name")
	allow(&telemetry.Tracing_CustomTag{}, "literal", "header", "environment")
	allow(&telemetry.Tracing_Literal{}, "value")
	allow(&telemetry.Tracing_RequestHeader{}, "name", "default_value")
	allow(&telemetry.Tracing_Environment{}, "name", "default_value")
	allow(&telemetry.AccessLogging{}, "providers", "disabled", "filter")
	allow(&telemetry.AccessLogging_Filter{}, "expression")
}

// notSupportedNotes say why a field Istio defines is refused, where the
// bare "not supported" would leave a user guessing.
var notSupportedNotes = map[protoreflect.FullName]string{
	"istio.security.v1beta1.RequestAuthentication.targetRef":  "policy attachment to a Gateway API resource is not implemented; select the workloads with selector.matchLabels",
	"istio.security.v1beta1.RequestAuthentication.targetRefs": "policy attachment to a Gateway API resource is not implemented; select the workloads with selector.matchLabels",
	"istio.security.v1beta1.JWTRule.space_delimited_claims":   "claims are matched as JSON strings or lists of strings only",
}

// walker checks a generic JSON tree (from encoding/json with UseNumber)
// against a message's schema and the supported subset, reporting every
// problem with its path, and rewrites what protojson reads differently from
// Istio: durations in Go's syntax ("100ms", "3m") become protojson's ("0.1s").
type walker struct{ errs errs }

func (w walker) message(path string, v any, md protoreflect.MessageDescriptor) any {
	if v == nil {
		return nil
	}
	switch md.FullName() {
	case "google.protobuf.Duration":
		return w.duration(path, v)
	case "google.protobuf.UInt32Value", "google.protobuf.Int32Value", "google.protobuf.UInt64Value",
		"google.protobuf.Int64Value", "google.protobuf.BoolValue", "google.protobuf.StringValue",
		"google.protobuf.DoubleValue", "google.protobuf.FloatValue":
		return w.scalar(path, v, md.Fields().ByName("value"))
	}
	obj, ok := v.(map[string]any)
	if !ok {
		w.errs.add(path, ErrInvalid, "want an object, got %s", jsonType(v))
		return v
	}
	allowed := supported[md.FullName()]
	oneofs := map[protoreflect.FullName]string{}
	for _, k := range sortedKeys(obj) {
		p := join(path, k)
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil {
			w.errs.add(p, ErrUnknownField, "%s", unknownMsg(k, md))
			continue
		}
		if !allowed[fd.Name()] {
			if note := notSupportedNotes[md.FullName()+"."+protoreflect.FullName(fd.Name())]; note != "" {
				w.errs.add(p, ErrNotSupported, "not supported: %s", note)
			} else {
				w.errs.add(p, ErrNotSupported, "")
			}
			continue
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && obj[k] != nil {
			if prev, dup := oneofs[od.FullName()]; dup {
				w.errs.add(p, ErrInvalid, "only one of %s and %s may be set", prev, k)
				continue
			}
			oneofs[od.FullName()] = k
		}
		obj[k] = w.field(p, obj[k], fd)
	}
	return obj
}

func (w walker) field(path string, v any, fd protoreflect.FieldDescriptor) any {
	if v == nil {
		return nil
	}
	switch {
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			w.errs.add(path, ErrInvalid, "want an object, got %s", jsonType(v))
			return v
		}
		for _, k := range sortedKeys(obj) {
			if kd := fd.MapKey().Kind(); kd == protoreflect.Uint32Kind || kd == protoreflect.Int32Kind {
				if n, err := strconv.ParseUint(k, 10, 32); err != nil || (kd == protoreflect.Int32Kind && n > math.MaxInt32) {
					w.errs.add(mapKey(path, k), ErrInvalid, "%q: the key must be a number", k)
					continue
				}
			}
			obj[k] = w.single(mapKey(path, k), obj[k], fd.MapValue())
		}
		return obj
	case fd.IsList():
		arr, ok := v.([]any)
		if !ok {
			w.errs.add(path, ErrInvalid, "want a list, got %s", jsonType(v))
			return v
		}
		for i := range arr {
			arr[i] = w.single(index(path, i), arr[i], fd)
		}
		return arr
	}
	return w.single(path, v, fd)
}

func (w walker) single(path string, v any, fd protoreflect.FieldDescriptor) any {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		return w.message(path, v, fd.Message())
	}
	return w.scalar(path, v, fd)
}

func (w walker) scalar(path string, v any, fd protoreflect.FieldDescriptor) any {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if _, ok := v.(string); !ok {
			w.errs.add(path, ErrInvalid, "want a string, got %s", jsonType(v))
		}
	case protoreflect.BytesKind:
		s, ok := v.(string)
		if !ok {
			w.errs.add(path, ErrInvalid, "want base64-encoded bytes, got %s", jsonType(v))
		} else if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			w.errs.add(path, ErrInvalid, "not base64-encoded bytes: %v", err)
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			w.errs.add(path, ErrInvalid, "want true or false, got %s", jsonType(v))
		}
	case protoreflect.EnumKind:
		switch x := v.(type) {
		case string:
			if fd.Enum().Values().ByName(protoreflect.Name(x)) == nil {
				w.errs.add(path, ErrInvalid, "%q is not one of %s", x, enumNames(fd.Enum()))
			}
		case json.Number:
			n, err := strconv.ParseInt(string(x), 10, 32)
			if err != nil || fd.Enum().Values().ByNumber(protoreflect.EnumNumber(n)) == nil {
				w.errs.add(path, ErrInvalid, "%s is not one of %s", x, enumNames(fd.Enum()))
			}
		default:
			w.errs.add(path, ErrInvalid, "want one of %s, got %s", enumNames(fd.Enum()), jsonType(v))
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return w.integer(path, v, math.MinInt32, math.MaxInt32)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return w.integer(path, v, 0, math.MaxUint32)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return w.integer(path, v, math.MinInt64, math.MaxInt64)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return w.integer(path, v, 0, math.MaxInt64)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		n, ok := v.(json.Number)
		if !ok {
			w.errs.add(path, ErrInvalid, "want a number, got %s", jsonType(v))
			break
		}
		if _, err := n.Float64(); err != nil {
			w.errs.add(path, ErrInvalid, "%s is not a number", n)
		}
	default:
		w.errs.add(path, ErrNotSupported, "")
	}
	return v
}

// integer accepts a JSON number or a quoted one (as protojson does) in
// [lo, hi], and hands protojson the number.
func (w walker) integer(path string, v any, lo, hi int64) any {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = string(x)
	case string:
		s = x
	default:
		w.errs.add(path, ErrInvalid, "want an integer, got %s", jsonType(v))
		return v
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		w.errs.add(path, ErrInvalid, "%s is not an integer in [%d, %d]", s, lo, hi)
		return v
	}
	return json.Number(s)
}

// duration reads Istio's durations: Go's syntax ("1s", "100ms", "1m30s",
// "1.5s"), as Istio's own decoder accepts, and returns protojson's form.
func (w walker) duration(path string, v any) any {
	s, ok := v.(string)
	if !ok {
		w.errs.add(path, ErrInvalid, "want a duration such as \"1.5s\" or \"100ms\", got %s", jsonType(v))
		return v
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		w.errs.add(path, ErrInvalid, "%q is not a duration such as \"1.5s\" or \"100ms\"", s)
		return v
	}
	if d < 0 {
		w.errs.add(path, ErrInvalid, "%q: must not be negative", s)
		return v
	}
	return protoDuration(d)
}

func protoDuration(d time.Duration) string {
	secs, nanos := int64(d/time.Second), int64(d%time.Second)
	if nanos == 0 {
		return strconv.FormatInt(secs, 10) + "s"
	}
	return strings.TrimRight(fmt.Sprintf("%d.%09d", secs, nanos), "0") + "s"
}

func unknownMsg(k string, md protoreflect.MessageDescriptor) string {
	fields := md.Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); distance(strings.ToLower(fd.JSONName()), strings.ToLower(k)) <= 2 {
			return fmt.Sprintf("unknown field (did you mean %q?)", fd.JSONName())
		}
	}
	return "unknown field"
}

func enumNames(ed protoreflect.EnumDescriptor) string {
	var names []string
	for i := range ed.Values().Len() {
		names = append(names, string(ed.Values().Get(i).Name()))
	}
	return strings.Join(names, ", ")
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// distance is the Levenshtein distance of a and b, for typo suggestions.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
