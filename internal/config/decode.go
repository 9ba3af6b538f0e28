package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"

	"github.com/sextant-mesh/sextant/internal/manifest"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// MaxDocumentBytes bounds one document of a stream.
const MaxDocumentBytes = 1 << 20

// Decode reads a stream of config objects: one JSON object, or YAML with
// any number of documents separated by "---" lines, each a VirtualService,
// DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication,
// AuthorizationPolicy or Telemetry in
// Kubernetes' shape (apiVersion, kind, metadata, spec), or
// a "kind: List" holding such items. Every object is checked against Istio's
// schema and Sextant's subset and validated (Validate); on any problem
// nothing is returned and the error is an Errors naming each field. A
// namespace left out is "default".
func Decode(data []byte) ([]*Object, error) {
	docs := manifest.Split(data)
	var (
		list Errors
		out  []*Object
	)
	for i, doc := range docs {
		c := errs{doc: i, list: &list}
		if len(doc.Data) > MaxDocumentBytes {
			c.add("", ErrInvalid, "document is %d bytes, more than %d", len(doc.Data), MaxDocumentBytes)
			continue
		}
		// The error names the line of data, not of the document. Strict:
		// a key given twice in one mapping (a second metadata: would name
		// another object) is refused, not kept last.
		js, err := doc.StrictJSON()
		if err != nil {
			if strings.Contains(err.Error(), "already set in map") {
				c.add("", ErrInvalid, "a key given twice: %v", err)
			} else {
				c.add("", ErrInvalid, "not YAML or JSON: %v", err)
			}
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			c.add("", ErrInvalid, "not YAML or JSON: %v", err)
			continue
		}
		if v == nil {
			continue // an empty document: comments only
		}
		if placeholders(c, "", v) {
			continue
		}
		out = append(out, decodeItem(c, "", v)...)
	}
	for _, e := range list {
		e.Docs = len(docs)
	}
	if len(list) > 0 {
		return nil, list
	}
	if len(out) == 0 {
		return nil, Errors{{Msg: "no objects in the input", Err: ErrInvalid}}
	}
	seen := map[Key]bool{}
	for _, o := range out {
		if seen[o.Key] {
			return nil, Errors{{Msg: fmt.Sprintf("%s appears twice in the input", o.Key), Err: ErrInvalid}}
		}
		seen[o.Key] = true
	}
	return out, nil
}

// apiVersions are the versions read, per group; all share v1's schema.
var apiVersions = map[string]map[string]bool{
	Group:          {Group + "/v1": true, Group + "/v1beta1": true, Group + "/v1alpha3": true},
	SecurityGroup:  {SecurityGroup + "/v1": true, SecurityGroup + "/v1beta1": true},
	TelemetryGroup: {TelemetryGroup + "/v1": true, TelemetryGroup + "/v1alpha1": true},
}

// unservedKinds are Istio's kinds Sextant refuses, each with why.
var unservedKinds = map[string]string{
	"EnvoyFilter":   "it patches Envoy's own configuration, which Sextant's gateway is not; say what it does with Sextant's fields",
	"WasmPlugin":    "it loads a Wasm module into Envoy, which Sextant's gateway does not run",
	"WorkloadGroup": "not implemented yet",
	"ProxyConfig":   "it tunes Envoy's bootstrap, which Sextant does not run",
}

const kindList = "VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication, AuthorizationPolicy, RequestAuthentication or Telemetry"

// decodeItem decodes one object, or each item of a List, at path.
func decodeItem(c errs, path string, v any) []*Object {
	obj, ok := v.(map[string]any)
	if !ok {
		c.add(path, ErrInvalid, "want an object, got %s", jsonType(v))
		return nil
	}
	kind, _ := obj["kind"].(string)
	if kind == "List" {
		return decodeList(c, path, obj)
	}
	// An object of another API group (a Pod, a Node) is named as such,
	// rather than blamed field by field for not being a VirtualService.
	if apiVersion, _ := obj["apiVersion"].(string); kind != "" && kindGroups[kind] == "" &&
		!strings.HasPrefix(apiVersion, Group+"/") && !strings.HasPrefix(apiVersion, SecurityGroup+"/") &&
		!strings.HasPrefix(apiVersion, TelemetryGroup+"/") {
		c.add(join(path, "kind"), ErrInvalid, "%s", manifest.Mismatch(apiVersion, kind, "a "+kindList))
		return nil
	}
	n := len(*c.list)
	o := &Object{}
	for _, k := range sortedKeys(obj) {
		p := join(path, k)
		switch k {
		case "apiVersion":
			s, _ := obj[k].(string)
			kind, _ := obj["kind"].(string)
			group := kindGroups[kind]
			if group == "" {
				group, _, _ = strings.Cut(s, "/")
			}
			if versions, ok := apiVersions[group]; !ok || !versions[s] {
				if group != SecurityGroup && group != TelemetryGroup {
					group = Group
				}
				c.add(p, ErrInvalid, "%v: want %s/v1 (%s)", obj[k], group, versionsNote[group])
			}
		case "kind":
			s, _ := obj[k].(string)
			switch {
			case kindGroups[s] != "":
				o.Kind = s
			case unservedKinds[s] != "":
				c.add(p, ErrNotSupported, "%s: not supported: %s (Sextant reads %s)", s, unservedKinds[s], strings.Replace(kindList, " or ", " and ", 1))
			default:
				c.add(p, ErrInvalid, "%v: want %s", obj[k], kindList)
			}
		case "metadata":
			decodeMeta(c, p, obj[k], o)
		case "spec", "status":
			// spec is read below, once kind is known; status is the
			// cluster's and ignored, so that kubectl output pastes in.
		default:
			c.add(p, ErrUnknownField, "")
		}
	}
	if obj["apiVersion"] == nil {
		c.add(join(path, "apiVersion"), ErrInvalid, "required")
	}
	if obj["kind"] == nil {
		c.add(join(path, "kind"), ErrInvalid, "required")
	}
	if obj["metadata"] == nil {
		c.add(join(path, "metadata.name"), ErrInvalid, "required")
	}
	if o.Kind == "" {
		return nil
	}
	specPath := join(path, "spec")
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		if obj["spec"] == nil {
			c.add(specPath, ErrInvalid, "required")
		} else {
			c.add(specPath, ErrInvalid, "want an object, got %s", jsonType(obj["spec"]))
		}
		return nil
	}
	var msg proto.Message
	switch o.Kind {
	case KindVirtualService:
		o.VirtualService = &networking.VirtualService{}
		msg = o.VirtualService
	case KindGateway:
		o.Gateway = &networking.Gateway{}
		msg = o.Gateway
	case KindServiceEntry:
		o.ServiceEntry = &networking.ServiceEntry{}
		msg = o.ServiceEntry
	case KindWorkloadEntry:
		o.WorkloadEntry = &networking.WorkloadEntry{}
		msg = o.WorkloadEntry
	case KindSidecar:
		o.Sidecar = &networking.Sidecar{}
		msg = o.Sidecar
	case KindPeerAuthentication:
		o.PeerAuthentication = &security.PeerAuthentication{}
		msg = o.PeerAuthentication
	case KindAuthorizationPolicy:
		o.AuthorizationPolicy = &security.AuthorizationPolicy{}
		msg = o.AuthorizationPolicy
	case KindRequestAuthentication:
		o.RequestAuthentication = &security.RequestAuthentication{}
		msg = o.RequestAuthentication
	case KindTelemetry:
		o.Telemetry = &telemetry.Telemetry{}
		msg = o.Telemetry
	default:
		o.DestinationRule = &networking.DestinationRule{}
		msg = o.DestinationRule
	}
	w := walker{errs: c}
	w.message(specPath, spec, msg.ProtoReflect().Descriptor())
	if len(*c.list) > n {
		return nil
	}
	js, err := json.Marshal(spec)
	if err == nil {
		err = protojson.Unmarshal(js, msg)
	}
	if err != nil {
		// The walker checks what protojson checks; this is a backstop.
		c.add(specPath, ErrInvalid, "%v", err)
		return nil
	}
	validate(c, path, o)
	if len(*c.list) > n {
		return nil
	}
	return []*Object{o}
}

var versionsNote = map[string]string{
	Group:          "v1beta1 and v1alpha3 are read as v1",
	SecurityGroup:  "v1beta1 is read as v1",
	TelemetryGroup: "v1alpha1 is read as v1",
}

func decodeList(c errs, path string, obj map[string]any) []*Object {
	var out []*Object
	for _, k := range sortedKeys(obj) {
		switch k {
		case "apiVersion", "kind", "metadata":
		case "items":
			items, ok := obj[k].([]any)
			if !ok {
				c.add(join(path, k), ErrInvalid, "want a list, got %s", jsonType(obj[k]))
				continue
			}
			for i, it := range items {
				out = append(out, decodeItem(c, index(join(path, "items"), i), it)...)
			}
		default:
			c.add(join(path, k), ErrUnknownField, "")
		}
	}
	return out
}

// metaIgnored are ObjectMeta fields Kubernetes sets; they are read and
// dropped so that "kubectl get -o yaml" output pastes in.
var metaIgnored = map[string]bool{
	"uid": true, "resourceVersion": true, "generation": true, "creationTimestamp": true,
	"managedFields": true, "selfLink": true,
}

// metaUnsupported are ObjectMeta fields with a meaning Sextant does not implement.
var metaUnsupported = map[string]bool{
	"generateName": true, "deletionTimestamp": true, "deletionGracePeriodSeconds": true,
	"ownerReferences": true, "finalizers": true,
}

func decodeMeta(c errs, path string, v any, o *Object) {
	m, ok := v.(map[string]any)
	if !ok {
		c.add(path, ErrInvalid, "want an object, got %s", jsonType(v))
		return
	}
	o.Namespace = "default"
	for _, k := range sortedKeys(m) {
		p := join(path, k)
		switch {
		case k == "name":
			s, _ := m[k].(string)
			if !naming.ValidName(s) || len(s) > 128 {
				c.add(p, ErrInvalid, "%v: want 1..128 of [a-z0-9._-], starting and ending with a letter or digit", m[k])
			}
			o.Name = s
		case k == "namespace":
			s, _ := m[k].(string)
			if !naming.ValidName(s) {
				c.add(p, ErrInvalid, "%v: want 1..128 of [a-z0-9._-], starting and ending with a letter or digit", m[k])
			}
			o.Namespace = s
		case k == "labels" || k == "annotations":
			sm := stringMap(c, p, m[k])
			if k == "labels" {
				o.Labels = sm
			} else {
				o.Annotations = sm
			}
		case metaIgnored[k]:
		case metaUnsupported[k]:
			c.add(p, ErrNotSupported, "")
		default:
			c.add(p, ErrUnknownField, "")
		}
	}
	if m["name"] == nil {
		c.add(join(path, "name"), ErrInvalid, "required")
	}
}

func stringMap(c errs, path string, v any) map[string]string {
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		c.add(path, ErrInvalid, "want an object of strings, got %s", jsonType(v))
		return nil
	}
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		s, ok := x.(string)
		if !ok {
			c.add(mapKey(path, k), ErrInvalid, "want a string, got %s", jsonType(x))
			continue
		}
		out[k] = s
	}
	return out
}
