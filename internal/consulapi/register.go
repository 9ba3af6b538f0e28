package consulapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/dnsapi"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/jsonkeys"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// MaxBody is the largest register body accepted (Consul's agent accepts
// far less in practice: one service and its checks).
const MaxBody = 1 << 20

// Registration is a decoded /v1/agent/service/register body: what Sextant
// keeps of it.
type Registration struct {
	ID, Name, Address string
	Port              int
	Tags              []string
	Meta              map[string]string
	Weights           *weights // nil: not given (Consul's {1, 1})
	Checks            []CheckDefinition
	// Kind, TaggedAddresses, Locality and Ports are kept as reserved
	// labels (attrs.go); Node is the Consul node (the agent's, or a
	// catalog registration's).
	Kind            string
	TaggedAddresses map[string]serviceAddress
	Locality        *locality
	Ports           []servicePort
	Node            string
	SocketPath      string
	// ConsulID is the service's Consul id when its instance id differs
	// (a catalog node's service: node.go).
	ConsulID string
	// ConnectNative and EnableTagOverride are kept and answered back;
	// Sextant acts on neither.
	ConnectNative, EnableTagOverride bool
	// Proxy is a Connect proxy's configuration (Kind connect-proxy), kept
	// as given and answered back; Sextant configures no proxy from it.
	Proxy json.RawMessage
	// Sidecar is Connect.SidecarService as given (sidecar.go); SidecarID
	// the instance id of the sidecar registered with the service.
	Sidecar   json.RawMessage
	SidecarID string
	// FromConfig: defined in a configuration file (configfile.go).
	FromConfig bool
}

// field is how a member of a Consul object is read: its name as Consul
// spells it (for errors), and what to do with its value.
type field struct {
	name string
	set  func(raw json.RawMessage) error
}

// normalize is how member names are matched, as Consul matches them:
// without regard to case or underscores (Go's decoder and Consul's
// snake_case aliases: "Name", "name", "enable_tag_override").
func normalize(k string) string {
	return strings.ToLower(strings.ReplaceAll(k, "_", ""))
}

// decodeObject reads raw as a JSON object and hands each member to its
// field; a member no field knows is an error naming it, as Sextant's own
// API rejects unknown fields (a typo is caught, not ignored).
func decodeObject(raw json.RawMessage, path string, fields []field) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return typeError(path, "an object", raw, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first error is the same at every call
	seen := map[string]string{}
	for _, k := range keys {
		n := normalize(k)
		if prev, ok := seen[n]; ok {
			return badRequest(fmt.Sprintf("%s: members %q and %q are the same field", orBody(path), prev, k))
		}
		seen[n] = k
		i := slices.IndexFunc(fields, func(f field) bool { return normalize(f.name) == n })
		if i < 0 {
			return badRequest(fmt.Sprintf("%s: unknown field %q", orBody(path), k))
		}
		if err := fields[i].set(m[k]); err != nil {
			return err
		}
	}
	return nil
}

func orBody(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// typeError is the 400 of a value of the wrong JSON type.
func typeError(path, want string, raw json.RawMessage, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badRequest(fmt.Sprintf("%s: malformed JSON: %v", orBody(path), err))
	}
	return badRequest(fmt.Sprintf("%s: expected %s, got %s", orBody(path), want, jsonKind(raw)))
}

func jsonKind(raw json.RawMessage) string {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func str(path string, dst *string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		if isNull(raw) {
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return typeError(path, "a string", raw, err)
		}
		return nil
	}
}

func integer(path string, dst *int) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		if isNull(raw) {
			return nil
		}
		var n json.Number
		if jsonKind(raw) != "a number" {
			return badRequest(fmt.Sprintf("%s: expected an integer, got %s", path, jsonKind(raw)))
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return typeError(path, "an integer", raw, err)
		}
		v, err := strconv.ParseInt(string(n), 10, 32)
		if err != nil {
			return badRequest(fmt.Sprintf("%s: %s is not an integer of 32 bits", path, n))
		}
		*dst = int(v)
		return nil
	}
}

func boolean(path string, dst *bool) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		if isNull(raw) {
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return typeError(path, "a boolean", raw, err)
		}
		return nil
	}
}

// jsonValue decodes a member into dst with the standard decoder.
func jsonValue(path, want string, dst any) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		if isNull(raw) {
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return typeError(path, want, raw, err)
		}
		return nil
	}
}

// ignored accepts a member Sextant has no use for, of its Consul type.
func ignored(path, want string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		if isNull(raw) || jsonKind(raw) == want {
			return nil
		}
		return badRequest(fmt.Sprintf("%s: expected %s, got %s", path, want, jsonKind(raw)))
	}
}

// refused is a member Consul knows and Sextant does not serve: accepted
// only empty (as Consul's clients send it), else a 400 naming it.
func refused(path, what string, empty ...string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		b := string(bytes.TrimSpace(raw))
		if b == "null" || b == `""` || b == "{}" || b == "[]" || b == "false" || b == "0" || slices.Contains(empty, b) {
			return nil
		}
		return badRequest(fmt.Sprintf("%s: %s is not supported by Sextant's Consul-compatible API", path, what))
	}
}

// DecodeRegister decodes a /v1/agent/service/register body strictly:
// malformed JSON, a key given twice in one object, a member of the wrong
// type, an unknown member and a
// Consul feature Sextant does not serve are 400s naming the field. It
// checks types only; Instance checks the values.
func DecodeRegister(body []byte) (*Registration, error) {
	reg := &Registration{}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("empty body: a service definition (a JSON object) is required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, badRequest("malformed JSON: " + strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("unexpected data after the JSON object")
	}
	if err := duplicateKeys(body); err != nil {
		return nil, err
	}
	err := decodeObject(raw, "", []field{
		{"ID", str("ID", &reg.ID)},
		{"Name", str("Name", &reg.Name)},
		{"Address", str("Address", &reg.Address)},
		{"Port", integer("Port", &reg.Port)},
		{"Tags", func(raw json.RawMessage) error {
			if isNull(raw) {
				return nil
			}
			if err := json.Unmarshal(raw, &reg.Tags); err != nil {
				return typeError("Tags", "an array of strings", raw, err)
			}
			return nil
		}},
		{"Meta", func(raw json.RawMessage) error {
			if isNull(raw) {
				return nil
			}
			if err := json.Unmarshal(raw, &reg.Meta); err != nil {
				return typeError("Meta", "an object of strings", raw, err)
			}
			return nil
		}},
		{"Weights", func(raw json.RawMessage) error {
			if isNull(raw) {
				return nil
			}
			reg.Weights = &weights{}
			return decodeObject(raw, "Weights", []field{
				{"Passing", integer("Weights.Passing", &reg.Weights.Passing)},
				{"Warning", integer("Weights.Warning", &reg.Weights.Warning)},
			})
		}},
		{"EnableTagOverride", boolean("EnableTagOverride", &reg.EnableTagOverride)},
		{"Check", func(raw json.RawMessage) error {
			if isNull(raw) {
				return nil
			}
			c, err := decodeCheck(raw, "Check")
			if err != nil {
				return err
			}
			reg.Checks = append(reg.Checks, c)
			return nil
		}},
		{"Checks", func(raw json.RawMessage) error {
			if isNull(raw) {
				return nil
			}
			var list []json.RawMessage
			if err := json.Unmarshal(raw, &list); err != nil {
				return typeError("Checks", "an array of checks", raw, err)
			}
			for i, c := range list {
				if isNull(c) {
					continue
				}
				d, err := decodeCheck(c, "Checks["+strconv.Itoa(i)+"]")
				if err != nil {
					return err
				}
				reg.Checks = append(reg.Checks, d)
			}
			return nil
		}},
		{"Kind", str("Kind", &reg.Kind)},
		{"Namespace", refused("Namespace", "a Consul Enterprise namespace (this API serves one Sextant namespace, --consul-namespace)", `"default"`)},
		{"Partition", refused("Partition", "an admin partition (Consul Enterprise)", `"default"`)},
		{"Ports", jsonValue("Ports", "an array of ports (Name, Port, Default)", &reg.Ports)},
		{"SocketPath", str("SocketPath", &reg.SocketPath)},
		{"TaggedAddresses", jsonValue("TaggedAddresses", "an object of addresses (Address, Port)", &reg.TaggedAddresses)},
		{"Proxy", func(raw json.RawMessage) error {
			if isNull(raw) {
				return nil
			}
			if jsonKind(raw) != "an object" {
				return badRequest("Proxy: expected an object, got " + jsonKind(raw))
			}
			reg.Proxy = raw
			return nil
		}},
		{"Connect", func(raw json.RawMessage) error {
			if isNull(raw) {
				return nil
			}
			return decodeObject(raw, "Connect", []field{
				{"Native", boolean("Connect.Native", &reg.ConnectNative)},
				{"SidecarService", func(raw json.RawMessage) error {
					if isNull(raw) {
						return nil
					}
					if jsonKind(raw) != "an object" {
						return badRequest("Connect.SidecarService: expected an object, got " + jsonKind(raw))
					}
					reg.Sidecar = raw
					return nil
				}},
			})
		}},
		{"AI", refused("AI", "AI service metadata")},
		{"Locality", jsonValue("Locality", "an object (Region, Zone)", &reg.Locality)},
		{"PeerName", refused("PeerName", "cluster peering")},
		{"Datacenter", refused("Datacenter", "a datacenter in the body")},
	})
	if err != nil {
		return nil, err
	}
	if w := reg.Weights; w != nil {
		// Consul's ValidateWeights.
		if w.Passing < 1 {
			return nil, badRequest(fmt.Sprintf("Weights.Passing: %d must be at least 1", w.Passing))
		}
		if w.Warning < 0 {
			return nil, badRequest(fmt.Sprintf("Weights.Warning: %d must be at least 0", w.Warning))
		}
	}
	return reg, nil
}

// Instance is the instance reg registers in namespace ns: ID defaults to
// Name, as in Consul; Address to host (the client's address, as Consul
// takes its agent's). Every value is checked against the instance's
// rules, and an error names the Consul field.
func (reg *Registration) Instance(ns, host string) (*instance.Instance, error) {
	if reg.Name == "" {
		return nil, badRequest("Name: missing service name")
	}
	if !naming.ValidName(reg.Name) {
		return nil, badRequest(fmt.Sprintf("Name: %q is not a valid Sextant service name: 1..128 chars of [a-z0-9-._], starting and ending with a letter or digit", reg.Name))
	}
	id := reg.ID
	if id == "" {
		id = reg.Name
	}
	if !instance.ValidID(id) {
		return nil, badRequest(fmt.Sprintf("ID: %q is not a valid Sextant instance id: 1..128 chars of [A-Za-z0-9._:-]", id))
	}
	if reg.Address != "" {
		host = reg.Address
	}
	if reg.Port < 0 || reg.Port > 65535 {
		return nil, badRequest(fmt.Sprintf("Port: %d is out of range 1..65535 (or 0, none)", reg.Port))
	}
	weight := sextantWeight(reg.Weights)
	defaultCheckIDs(id, reg.Name, reg.Checks)
	md, err := metadata(reg.Tags, reg.Meta, reg.putAttrs)
	if err != nil {
		return nil, err
	}
	in := &instance.Instance{
		ID: id, Namespace: ns, Service: reg.Name, Host: host, Port: reg.Port, Weight: weight, Metadata: md,
	}
	if err := applyChecks(in, nonScript(reg.Checks)); err != nil {
		return nil, err
	}
	if err := instance.Prepare(-1, in); err != nil {
		var fe *instance.FieldError
		if errors.As(err, &fe) {
			return nil, badRequest(consulField(fe.Field) + ": " + fe.Msg)
		}
		return nil, err
	}
	return in, nil
}

// consulField names an instance field as the Consul body spells it.
func consulField(f string) string {
	switch {
	case f == "host":
		return "Address"
	case f == "port":
		return "Port"
	case f == "id":
		return "ID"
	case f == "service":
		return "Name"
	case f == "weight":
		return "Weights.Passing"
	case f == "namespace":
		return "namespace (--consul-namespace)"
	case strings.HasPrefix(f, "metadata"):
		return "Meta"
	case strings.HasPrefix(f, "checks["):
		// Check, then Checks, in order.
		return "Checks[" + strings.TrimPrefix(f, "checks[")
	}
	return f
}

// metadata is the instance metadata of Consul's tags and Meta: tag T is
// the key tag/T (empty value), each Meta key itself. Keys follow Sextant's
// label rule; a Meta key under tag/ would read back as a tag and is
// refused.
func metadata(tags []string, meta map[string]string, attrs func(map[string]string) error) (label.Labels, error) {
	if n := len(tags) + len(meta); n > instance.MaxMetadata {
		return label.Labels{}, badRequest(fmt.Sprintf("Meta and Tags: %d entries (%d tags, %d Meta keys), at most %d together (each tag is a metadata entry in Sextant)",
			n, len(tags), len(meta), instance.MaxMetadata))
	}
	m := make(map[string]string, len(tags)+len(meta))
	for i, t := range tags {
		if t == "" || !label.ValidKey(dnsapi.TagPrefix+t) {
			return label.Labels{}, badRequest(fmt.Sprintf("Tags[%d]: %q is not a tag Sextant can keep: a tag T is the metadata key %sT, so T must be 1..%d bytes of [A-Za-z0-9._/-]",
				i, t, dnsapi.TagPrefix, 128-len(dnsapi.TagPrefix)))
		}
		m[dnsapi.TagPrefix+t] = ""
	}
	for k, v := range meta {
		if !label.ValidKey(k) {
			return label.Labels{}, badRequest(fmt.Sprintf("Meta: key %q is not a valid Sextant metadata key: 1..128 bytes of [A-Za-z0-9._/-]", k))
		}
		if reserved(strings.ToLower(k)) {
			return label.Labels{}, badRequest(fmt.Sprintf("Meta: key %q: the prefix %q is reserved (as in Consul); Sextant keeps Consul's own fields under it", k, reservedPrefix))
		}
		if strings.HasPrefix(strings.ToLower(k), dnsapi.TagPrefix) {
			return label.Labels{}, badRequest(fmt.Sprintf("Meta: key %q is under %s, where Sextant keeps tags: send it in Tags", k, dnsapi.TagPrefix))
		}
		if len(v) > instance.MaxValueLen {
			return label.Labels{}, badRequest(fmt.Sprintf("Meta[%q]: value of %d bytes, at most %d", k, len(v), instance.MaxValueLen))
		}
		m[k] = v
	}
	if attrs != nil {
		if err := attrs(m); err != nil {
			return label.Labels{}, err
		}
		if len(m) > instance.MaxMetadata {
			return label.Labels{}, badRequest(fmt.Sprintf("Meta and Tags: %d entries with the %d Sextant keeps for Consul's fields (Kind, TaggedAddresses, Locality, Ports, node), at most %d together",
				len(m), len(m)-len(tags)-len(meta), instance.MaxMetadata))
		}
	}
	return label.FromMap(m), nil
}

// register is PUT /v1/agent/service/register.
func (a *API) register(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	if err := acl.Require(r, instancesWrite(ns)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	body, err := readBody(w, r, MaxBody)
	if err != nil {
		return err
	}
	reg, err := DecodeRegister(body)
	if err != nil {
		return err
	}
	reg.Node = a.opts.Node // the agent's node, as Consul's agent registers
	if err := a.checkScripts(reg.Checks); err != nil {
		return err
	}
	var side *instance.Instance
	if len(reg.Sidecar) > 0 {
		sreg, err := a.sidecarOf(reg)
		if err != nil {
			return err
		}
		if err := a.checkScripts(sreg.Checks); err != nil {
			return err
		}
		if side, err = sreg.Instance(ns, clientHost(r)); err != nil {
			return err
		}
		reg.SidecarID = side.ID
	}
	in, err := reg.Instance(ns, clientHost(r))
	if err != nil {
		return err
	}
	batch := []*instance.Instance{in}
	if side != nil {
		if side.ID == in.ID {
			return badRequest("Connect.SidecarService.ID: the service's own id")
		}
		batch = append(batch, side) // one commit: both or neither
	}
	_, err = a.reg.RegisterGuarded(r.Context(), batch, a.sameNamespace(r, in.ID))
	if err != nil {
		return err
	}
	a.log.Debug("synced service", "service", in.ID)
	return writeValue(w, "")
}

// sameNamespace guards a write of id (at commit time): the instance it
// replaces or deletes must be in this API's namespace (an id is global in
// Sextant, so an id of another namespace is not this API's to touch), and
// the caller must be allowed to write it.
func (a *API) sameNamespace(r *http.Request, id string) func(cur *instance.Instance) error {
	ctx := r.Context()
	ns := a.opts.Namespace
	return func(cur *instance.Instance) error {
		if cur.Namespace != ns {
			return fmt.Errorf("consulapi: id %q is an instance of namespace %q, not of %q served here: %w", id, cur.Namespace, ns, store.ErrConflict)
		}
		if a.acl.Enabled() {
			return acl.RequireContext(ctx, instancesWrite(cur.Namespace))
		}
		return nil
	}
}

// deregister is PUT /v1/agent/service/deregister/{id}.
func (a *API) deregister(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := acl.Require(r, instancesWrite(a.opts.Namespace)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	if !instance.ValidID(id) {
		return notFound(fmt.Sprintf("Unknown service ID %q", id))
	}
	in := a.reg.Instances().Get(id)
	if in == nil || in.Namespace != a.opts.Namespace {
		return notFound(fmt.Sprintf("Unknown service ID %q", id))
	}
	ids := []string{id}
	if side := sidecarIDOf(in); side != "" && side != id {
		ids = append(ids, side) // its sidecar goes with it, as in Consul
	}
	_, missing, err := a.reg.DeregisterGuarded(r.Context(), ids, a.sameNamespace(r, id))
	if err != nil {
		return err
	}
	if slices.Contains(missing, id) {
		return notFound(fmt.Sprintf("Unknown service ID %q", id))
	}
	a.log.Debug("deregistered service", "service", id)
	return writeValue(w, "")
}

// maintenance is PUT /v1/agent/service/maintenance/{id}?enable=&reason=:
// Consul's maintenance mode is Sextant's isolation (kept, never answered
// as healthy).
func (a *API) maintenance(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := acl.Require(r, instancesWrite(a.opts.Namespace)); err != nil {
		return err
	}
	q := r.URL.Query()
	enable, err := strconv.ParseBool(q.Get("enable"))
	if err != nil {
		return badRequest(fmt.Sprintf("enable: %q is not a boolean (true or false)", q.Get("enable")))
	}
	cur := a.reg.Instances().Get(id)
	if cur == nil || cur.Namespace != a.opts.Namespace {
		return notFound(fmt.Sprintf("Unknown service ID %q", id))
	}
	reason := q.Get("reason")
	if old, _ := cur.Metadata.Get(labelMaintenance); cur.Isolated == enable && (!enable || old == reason) {
		return writeValue(w, "")
	}
	in := cur.Clone()
	in.Isolated = enable
	// The reason is the maintenance check's Notes, as Consul shows it.
	m := in.Metadata.Map()
	delete(m, labelMaintenance)
	if enable && reason != "" {
		if len(reason) > instance.MaxValueLen {
			return badRequest(fmt.Sprintf("reason: %d bytes, at most %d", len(reason), instance.MaxValueLen))
		}
		m[labelMaintenance] = reason
	}
	in.Metadata = label.FromMap(m)
	guard := a.sameNamespace(r, id)
	if _, err := a.reg.RegisterGuarded(r.Context(), []*instance.Instance{in}, func(now *instance.Instance) error {
		if now.Revision != cur.Revision {
			return fmt.Errorf("consulapi: service %q changed while its maintenance was set; retry: %w", id, store.ErrConflict)
		}
		return guard(now)
	}); err != nil {
		return err
	}
	return writeValue(w, "")
}

// checkScope refuses the query parameters that would name another scope
// than the one served: a datacenter, an Enterprise namespace or
// partition, a peer.
func (a *API) checkScope(r *http.Request) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	q := r.URL.Query()
	if dc := q.Get("dc"); dc != "" && dc != a.opts.Datacenter {
		// Consul's words, which its tools look for.
		return badRequest(fmt.Sprintf("No path to datacenter: dc %q (this API serves %q)", dc, a.opts.Datacenter))
	}
	for _, p := range []string{"ns", "partition"} {
		if v := q.Get(p); v != "" && v != "default" {
			return badRequest(fmt.Sprintf("%s: %q is not served: Consul Enterprise namespaces and partitions are not supported (this API serves the Sextant namespace %q, --consul-namespace)", p, v, a.opts.Namespace))
		}
	}
	if v := q.Get("peer"); v != "" {
		return badRequest("peer: cluster peering is not supported")
	}
	return nil
}

func instancesWrite(ns string) acl.Permission {
	return acl.Permission{Resource: acl.Instances, Access: acl.Write, Namespace: ns}
}

func instancesRead(ns string) acl.Permission {
	return acl.Permission{Resource: acl.Instances, Access: acl.Read, Namespace: ns}
}

// duplicateKeys is the 400 of a body that gives a key twice in one object
// ({"Name":"a","Name":"b"} would register b, a Meta key its last value),
// naming the key and its line; nil if it gives none.
func duplicateKeys(body []byte) error {
	var de *jsonkeys.DuplicateError
	if errors.As(jsonkeys.Check(body), &de) {
		return badRequest(fmt.Sprintf("%s: key %q given twice (line %d): give each key once", de.Field(), de.Key, de.Line))
	}
	return nil
}

// readBody reads a request's body up to limit bytes: a longer one is 413,
// as Consul answers, any other read failure 400.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", limit)}
		}
		return nil, badRequest("reading body: " + err.Error())
	}
	return body, nil
}
