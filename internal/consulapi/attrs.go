package consulapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// Consul's service attributes that Sextant's instance has no field for
// are kept on the instance as reserved metadata labels, under the prefix
// Consul itself reserves in Meta ("consul-"): they are durable with the
// instance, travel with it through a cluster's store, and are selectable
// like any label. The answers read them back into Consul's fields and
// never show them in Meta; a Meta key under the prefix is refused, as
// Consul refuses it.
//   - consul-node: the Consul node the service is on (node.go); absent on
//     instances registered through Sextant's own API, whose node is their
//     address;
//   - consul-kind: Kind (connect-proxy, mesh-gateway, ...), absent for a
//     typical service;
//   - consul-tagged-addresses, consul-locality, consul-ports: the JSON of
//     TaggedAddresses, Locality and Ports.
//
// A service without a port carries instance.NoPortLabel and Port 0.
const (
	reservedPrefix       = "consul-"
	labelNode            = "consul-node"
	labelKind            = "consul-kind"
	labelTaggedAddresses = "consul-tagged-addresses"
	labelLocality        = "consul-locality"
	labelPorts           = "consul-ports"
	labelConnectNative   = "consul-connect-native"
	labelTagOverride     = "consul-enable-tag-override"
	// labelNoAddress: registered without an Address; the instance's
	// host is the node's (or the client's) and Consul answers "".
	labelNoAddress = "consul-no-address"
	labelProxy     = "consul-proxy"
	// labelMaintenance is the reason given with maintenance mode.
	labelMaintenance = "consul-maintenance-reason"
	// labelWeights: the JSON of Weights, when the instance's weight does
	// not say them (weights.go).
	labelWeights = "consul-weights"
	// labelSocketPath: SocketPath, a Unix socket service (no port, no
	// address: Sextant routes nothing to it).
	labelSocketPath = "consul-socket-path"
)

// serviceAddress is Consul's ServiceAddress (a tagged address).
type serviceAddress struct {
	Address string
	Port    int
}

// locality is Consul's Locality.
type locality struct {
	Region string `json:",omitempty"`
	Zone   string `json:",omitempty"`
}

// servicePort is one of Consul's named Ports.
type servicePort struct {
	Name    string
	Port    int
	Default bool `json:",omitempty"`
}

// reserved reports whether a metadata key is kept for Consul's fields
// rather than shown in Meta.
func reserved(k string) bool {
	return strings.HasPrefix(k, reservedPrefix) || k == instance.NoPortLabel
}

// attrs are the Consul fields read back from an instance's labels.
type attrs struct {
	Node            string
	Kind            string
	TaggedAddresses map[string]serviceAddress
	Locality        *locality
	Ports           []servicePort
	ConnectNative   bool
	TagOverride     bool
	NoAddress       bool
	Proxy           json.RawMessage
	SocketPath      string
}

// attrsOf reads in's reserved labels; one that does not decode (written
// by another client of Sextant's API) is left out.
func attrsOf(in *instance.Instance) attrs {
	var a attrs
	md := in.Metadata
	a.Node, _ = md.Get(labelNode)
	a.Kind, _ = md.Get(labelKind)
	if v, ok := md.Get(labelTaggedAddresses); ok {
		_ = json.Unmarshal([]byte(v), &a.TaggedAddresses)
	}
	if v, ok := md.Get(labelLocality); ok {
		a.Locality = &locality{}
		if json.Unmarshal([]byte(v), a.Locality) != nil {
			a.Locality = nil
		}
	}
	if v, ok := md.Get(labelPorts); ok {
		_ = json.Unmarshal([]byte(v), &a.Ports)
	}
	_, a.ConnectNative = md.Get(labelConnectNative)
	_, a.TagOverride = md.Get(labelTagOverride)
	_, a.NoAddress = md.Get(labelNoAddress)
	a.SocketPath, _ = md.Get(labelSocketPath)
	if v, ok := md.Get(labelProxy); ok && json.Valid([]byte(v)) {
		a.Proxy = json.RawMessage(v)
	}
	return a
}

// validKinds are Consul's service kinds ("" is a typical service).
var validKinds = map[string]bool{
	"": true, "connect-proxy": true, "mesh-gateway": true, "terminating-gateway": true,
	"ingress-gateway": true, "api-gateway": true,
}

// putAttrs adds reg's Consul fields to the metadata m as reserved labels,
// checking them.
func (reg *Registration) putAttrs(m map[string]string) error {
	if !validKinds[reg.Kind] {
		return badRequest(fmt.Sprintf("Kind: %q is not a Consul service kind (connect-proxy, mesh-gateway, terminating-gateway, ingress-gateway, api-gateway, or none)", reg.Kind))
	}
	if reg.Kind != "" {
		m[labelKind] = reg.Kind
	}
	if reg.Node != "" {
		m[labelNode] = reg.Node
	}
	if reg.ConsulID != "" {
		m[labelServiceID] = reg.ConsulID
	}
	if reg.SidecarID != "" {
		m[labelSidecar] = reg.SidecarID
	}
	if reg.FromConfig {
		m[labelConfigFile] = ""
	}
	if reg.ConnectNative {
		m[labelConnectNative] = ""
	}
	if reg.EnableTagOverride {
		m[labelTagOverride] = ""
	}
	if reg.Address == "" {
		m[labelNoAddress] = ""
	}
	if len(reg.Proxy) > 0 && !isEmptyJSON(reg.Proxy) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, reg.Proxy); err != nil {
			return badRequest("Proxy: " + err.Error())
		}
		if buf.Len() > instance.MaxValueLen {
			return badRequest(fmt.Sprintf("Proxy: %d bytes of JSON, at most %d (it is kept as one metadata value)", buf.Len(), instance.MaxValueLen))
		}
		m[labelProxy] = buf.String()
	}
	if reg.Port == 0 {
		m[instance.NoPortLabel] = ""
	}
	if reg.SocketPath != "" {
		if reg.Port != 0 {
			return badRequest("SocketPath: a service has a Port or a SocketPath, not both")
		}
		if len(reg.SocketPath) > instance.MaxValueLen {
			return badRequest(fmt.Sprintf("SocketPath: %d bytes, at most %d", len(reg.SocketPath), instance.MaxValueLen))
		}
		m[labelSocketPath] = reg.SocketPath
	}
	if err := putScriptChecks(m, reg.Checks); err != nil {
		return err
	}
	if w := reg.Weights; w != nil && !impliedWeights(*w) {
		if err := putJSON(m, labelWeights, "Weights", w); err != nil {
			return err
		}
	}
	if len(reg.TaggedAddresses) > 0 {
		for k, ta := range reg.TaggedAddresses {
			if ta.Port < 0 || ta.Port > 65535 {
				return badRequest(fmt.Sprintf("TaggedAddresses[%q].Port: %d is out of range 0..65535", k, ta.Port))
			}
		}
		if err := putJSON(m, labelTaggedAddresses, "TaggedAddresses", reg.TaggedAddresses); err != nil {
			return err
		}
	}
	if reg.Locality != nil && *reg.Locality != (locality{}) {
		if err := putJSON(m, labelLocality, "Locality", reg.Locality); err != nil {
			return err
		}
	}
	if len(reg.Ports) > 0 {
		names := map[string]bool{}
		defaults := 0
		for i, p := range reg.Ports {
			switch {
			case p.Name == "":
				return badRequest(fmt.Sprintf("Ports[%d].Name: missing", i))
			case names[p.Name]:
				return badRequest(fmt.Sprintf("Ports[%d].Name: %q given twice", i, p.Name))
			case p.Port < 1 || p.Port > 65535:
				return badRequest(fmt.Sprintf("Ports[%d].Port: %d is out of range 1..65535", i, p.Port))
			}
			names[p.Name] = true
			if p.Default {
				defaults++
			}
		}
		if defaults > 1 {
			return badRequest("Ports: more than one is Default")
		}
		if err := putJSON(m, labelPorts, "Ports", reg.Ports); err != nil {
			return err
		}
	}
	return nil
}

func putJSON(m map[string]string, key, field string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return badRequest(fmt.Sprintf("%s: %v", field, err))
	}
	if len(b) > instance.MaxValueLen {
		return badRequest(fmt.Sprintf("%s: %d bytes of JSON, at most %d (it is kept as one metadata value)", field, len(b), instance.MaxValueLen))
	}
	m[key] = string(b)
	return nil
}
