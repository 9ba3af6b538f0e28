package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sextant-mesh/sextant/internal/naming"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

// Group is the API group of every kind this package reads; APIVersion is
// the version Encode writes. Decode also accepts v1beta1 and v1alpha3, which
// share v1's schema.
const (
	Group      = "networking.istio.io"
	APIVersion = Group + "/v1"
)

// SecurityGroup is the API group of the security kinds; Encode writes
// them as SecurityGroup/v1 (Decode also accepts v1beta1, the same schema).
const SecurityGroup = "security.istio.io"

// The kinds Sextant reads.
const (
	KindVirtualService      = "VirtualService"
	KindDestinationRule     = "DestinationRule"
	KindGateway             = "Gateway"
	KindPeerAuthentication  = "PeerAuthentication"
	KindAuthorizationPolicy = "AuthorizationPolicy"
	// KindRequestAuthentication: end-user authentication by JWT
	// (requestauth.go).
	KindRequestAuthentication = "RequestAuthentication"
)

// kindGroups maps every kind Sextant reads to its API group.
var kindGroups = map[string]string{
	KindVirtualService: Group, KindDestinationRule: Group, KindGateway: Group,
	KindPeerAuthentication: SecurityGroup, KindAuthorizationPolicy: SecurityGroup,
	KindRequestAuthentication: SecurityGroup,
	KindTelemetry:             TelemetryGroup,
}

// IsSecurity reports whether kind is one of the security kinds
// (PeerAuthentication, AuthorizationPolicy, RequestAuthentication): they configure workloads'
// inbound listeners, not services' routes.
func IsSecurity(kind string) bool { return kindGroups[kind] == SecurityGroup }

// RecordKind is the store's record kind for routing config objects.
const RecordKind = "config"

// Key names one config object: its kind, namespace and name. Its String is
// the object's record key in the store.
type Key struct {
	Kind      string
	Namespace string
	Name      string
}

// String returns "Kind/namespace/name", the record key.
func (k Key) String() string { return k.Kind + "/" + k.Namespace + "/" + k.Name }

// Compare orders keys by kind, namespace, then name.
func (k Key) Compare(o Key) int {
	if c := strings.Compare(k.Kind, o.Kind); c != 0 {
		return c
	}
	if c := strings.Compare(k.Namespace, o.Namespace); c != 0 {
		return c
	}
	return strings.Compare(k.Name, o.Name)
}

// ErrBadKey is returned by ParseKey.
var ErrBadKey = errors.New("config: malformed key")

// ParseKey parses a record key written by Key.String.
func ParseKey(s string) (Key, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || kindGroups[parts[0]] == "" ||
		!naming.ValidName(parts[1]) || !naming.ValidName(parts[2]) {
		return Key{}, fmt.Errorf("%w %q (want Kind/namespace/name)", ErrBadKey, s)
	}
	return Key{Kind: parts[0], Namespace: parts[1], Name: parts[2]}, nil
}

// Object is one decoded, validated config object. Exactly one of
// VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication,
// AuthorizationPolicy, RequestAuthentication and Telemetry is set, by Kind. Objects are immutable
// once decoded: a change is a new Object.
type Object struct {
	Key
	Labels      map[string]string
	Annotations map[string]string

	VirtualService  *networking.VirtualService
	DestinationRule *networking.DestinationRule
	Gateway         *networking.Gateway
	ServiceEntry    *networking.ServiceEntry
	// WorkloadEntry is an instance described in config (workloadentry.go).
	WorkloadEntry *networking.WorkloadEntry
	// Sidecar is read from networking.istio.io/v1, v1beta1 and v1alpha3
	// (sidecar.go).
	Sidecar *networking.Sidecar

	PeerAuthentication  *security.PeerAuthentication
	AuthorizationPolicy *security.AuthorizationPolicy
	// RequestAuthentication is read from security.istio.io/v1 and v1beta1.
	RequestAuthentication *security.RequestAuthentication

	// Telemetry is read from telemetry.istio.io/v1 and v1alpha1 (one schema).
	Telemetry *telemetry.Telemetry
}

// Spec returns the object's spec message.
func (o *Object) Spec() proto.Message {
	switch {
	case o.VirtualService != nil:
		return o.VirtualService
	case o.Gateway != nil:
		return o.Gateway
	case o.ServiceEntry != nil:
		return o.ServiceEntry
	case o.WorkloadEntry != nil:
		return o.WorkloadEntry
	case o.Sidecar != nil:
		return o.Sidecar
	case o.PeerAuthentication != nil:
		return o.PeerAuthentication
	case o.AuthorizationPolicy != nil:
		return o.AuthorizationPolicy
	case o.RequestAuthentication != nil:
		return o.RequestAuthentication
	case o.Telemetry != nil:
		return o.Telemetry
	}
	return o.DestinationRule
}

// envelope is the canonical encoding's shape; field order is fixed.
type envelope struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   meta            `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
}

type meta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Encode returns the object's canonical encoding: compact JSON in the
// Kubernetes shape (apiVersion networking.istio.io/v1 or
// security.istio.io/v1, kind, metadata with
// name, namespace, labels and annotations, spec), fields in a fixed order and
// map keys sorted, so that two objects are equal exactly when their encodings
// are. Decode reads it back. This is what the store keeps.
func (o *Object) Encode() []byte {
	spec, err := protojson.Marshal(o.Spec())
	if err != nil {
		// A decoded object always marshals; anything else is a bug.
		panic(fmt.Sprintf("config: encode %s: %v", o.Key, err))
	}
	var compact bytes.Buffer
	// protojson varies its whitespace on purpose; compacting makes it canonical.
	if err := json.Compact(&compact, spec); err != nil {
		panic(fmt.Sprintf("config: encode %s: %v", o.Key, err))
	}
	b, err := json.Marshal(envelope{
		APIVersion: kindGroups[o.Kind] + "/v1", Kind: o.Kind,
		Metadata: meta{Name: o.Name, Namespace: o.Namespace, Labels: o.Labels, Annotations: o.Annotations},
		Spec:     compact.Bytes(),
	})
	if err != nil {
		panic(fmt.Sprintf("config: encode %s: %v", o.Key, err))
	}
	return b
}

// DecodeRecord decodes one stored object (the bytes Encode wrote).
func DecodeRecord(b []byte) (*Object, error) {
	objs, err := Decode(b)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("config: a record holds %d objects, want 1", len(objs))
	}
	return objs[0], nil
}
