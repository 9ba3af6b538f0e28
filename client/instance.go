package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// DefaultNamespace is the namespace of an instance that names none.
const DefaultNamespace = "default"

// ErrBadService is wrapped by ParseService's errors.
var ErrBadService = errors.New("client: bad service")

// ParseService reads a service as people name it, in the CLI, a View, or
// the gateway's call queries: "namespace/name", or a bare "name" in namespace
// ns (DefaultNamespace when ns is ""). It refuses only what cannot name a
// service (an empty part, a second "/"); the server checks the names' syntax.
func ParseService(ref, ns string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok {
		namespace, name = ns, ref
		if namespace == "" {
			namespace = DefaultNamespace
		}
	}
	if namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%w %q: want NAME (namespace %s) or NAMESPACE/NAME", ErrBadService, ref, orDefault(ns))
	}
	return namespace, name, nil
}

func orDefault(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}

// DefaultWeight is the weight of an instance registered without one.
const DefaultWeight = 100

// Instance is one registered endpoint of a service. The fields up to
// TTLSeconds are what you register; Healthy, Revision, CreatedAt and
// UpdatedAt are set by the server and not sent on register.
type Instance struct {
	// ID is optional on register; the server derives one from
	// namespace/service/host:port when it is empty.
	ID        string `json:"id,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Service   string `json:"service"`
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Protocol  string `json:"protocol,omitempty"`
	Version   string `json:"version,omitempty"`
	// Weight is a pointer because 0 is meaningful (never picked by weighted
	// balancers) and differs from "unset" (the server's default, 100).
	// Use Weight(n) to set it.
	Weight   *int              `json:"weight,omitempty"`
	Isolated bool              `json:"isolated,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// TTLSeconds: 0 means no heartbeat needed; otherwise the instance turns
	// unhealthy after 3 x TTLSeconds without a heartbeat.
	TTLSeconds int `json:"ttl_seconds,omitempty"`
	// DeregisterAfterSeconds: with a TTL, the server deregisters the
	// instance once it has been unhealthy this long; 0: the server's
	// default (sextant server --deregister-after, never unless set).
	DeregisterAfterSeconds int `json:"deregister_after_seconds,omitempty"`
	// Checks are health checks the server runs itself (docs/health.md);
	// with checks, the instance is unhealthy while one is critical.
	Checks []Check `json:"checks,omitempty"`

	Healthy   bool      `json:"healthy"`
	Revision  uint64    `json:"revision,omitzero"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// VersionLabel is the label an instance's Version is selectable as, as on
// the server: selectors and subsets see it beside the metadata.
const VersionLabel = "version"

// Labels returns the labels selectors and subsets match, as the server
// sees them: the metadata, plus VersionLabel=Version when Version is set
// (the server refuses metadata that contradicts the version).
func (in *Instance) Labels() InstanceLabels { return InstanceLabels{in} }

// InstanceLabels are an instance's labels (Instance.Labels), read in place.
type InstanceLabels struct{ in *Instance }

// Get returns the value of label key.
func (l InstanceLabels) Get(key string) (string, bool) {
	if key == VersionLabel && l.in.Version != "" {
		return l.in.Version, true
	}
	v, ok := l.in.Metadata[key]
	return v, ok
}

// Map returns the labels as a new map.
func (l InstanceLabels) Map() map[string]string {
	m := make(map[string]string, len(l.in.Metadata)+1)
	for k, v := range l.in.Metadata {
		m[k] = v
	}
	if l.in.Version != "" {
		m[VersionLabel] = l.in.Version
	}
	return m
}

// Weight returns a pointer to w, for Instance.Weight.
func Weight(w int) *int { return &w }

// EffectiveWeight is the instance's weight, DefaultWeight when unset.
func (in *Instance) EffectiveWeight() int {
	if in.Weight == nil {
		return DefaultWeight
	}
	return *in.Weight
}

// registerForm is the register form of an Instance: the fields a client
// sets, none of those the server sets. Its field order is the wire order.
type registerForm struct {
	ID         string            `json:"id,omitempty"`
	Namespace  string            `json:"namespace,omitempty"`
	Service    string            `json:"service"`
	Host       string            `json:"host"`
	Port       int               `json:"port"`
	Protocol   string            `json:"protocol,omitempty"`
	Version    string            `json:"version,omitempty"`
	Weight     *int              `json:"weight,omitempty"`
	Isolated   bool              `json:"isolated,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	TTLSeconds int               `json:"ttl_seconds,omitempty"`
	// DeregisterAfterSeconds is the removal delay.
	DeregisterAfterSeconds int     `json:"deregister_after_seconds,omitempty"`
	Checks                 []Check `json:"checks,omitempty"`
}

func formOf(in *Instance) registerForm {
	return registerForm{
		ID: in.ID, Namespace: in.Namespace, Service: in.Service, Host: in.Host, Port: in.Port,
		Protocol: in.Protocol, Version: in.Version, Weight: in.Weight, Isolated: in.Isolated,
		Metadata: in.Metadata, TTLSeconds: in.TTLSeconds, DeregisterAfterSeconds: in.DeregisterAfterSeconds,
		Checks: in.Checks,
	}
}

// AppendRegisterBody appends the JSON body of a register request,
// {"instances":[...]}, to dst. Only the fields a client sets are written.
// Load generators can encode a body once and send it many times.
func AppendRegisterBody(dst []byte, instances ...Instance) []byte {
	forms := make([]registerForm, len(instances))
	for i := range instances {
		forms[i] = formOf(&instances[i])
	}
	return appendJSON(dst, struct {
		Instances []registerForm `json:"instances"`
	}{forms})
}

// AppendInstance appends the register form of one instance as a JSON object
// (metadata keys sorted). A client registers a few times per process, so
// this is encoding/json, not a hand-written encoder.
func AppendInstance(dst []byte, in *Instance) []byte {
	return appendJSON(dst, formOf(in))
}

// AppendIDsBody appends {"ids":[...]}, the body of heartbeat and batch
// deregister requests.
func AppendIDsBody(dst []byte, ids ...string) []byte {
	return appendJSON(dst, struct {
		IDs []string `json:"ids"`
	}{ids})
}

// appendJSON appends v encoded without HTML escaping (these bodies never
// reach a browser) and without the encoder's trailing newline.
func appendJSON(dst []byte, v any) []byte {
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only unsupported types fail, and these forms have none.
		panic("client: encoding a request body: " + err.Error())
	}
	out := buf.Bytes()
	return out[:len(out)-1]
}
