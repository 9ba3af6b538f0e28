package consulapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/kv"
)

// Consul's node model over Sextant's records (docs/compat.md, "Nodes"):
//   - the agent's node (Options.Node, NodeMeta) is this server: the
//     services registered through /v1/agent/service/register are on it;
//   - a node registered through PUT /v1/catalog/register is a record of
//     the KV kind (kv.Node: address, tagged addresses, meta, locality and
//     the checks registered through the catalog), durable on the one
//     revision sequence;
//   - a service is always an instance, which names its node with the
//     reserved label consul-node; an instance without it (registered
//     through Sextant's own API, Kubernetes, ...) is on a node named by
//     its address, as before.
//
// Consul's service ids are unique per node; Sextant's instance ids are
// unique per namespace. A service of a catalog node other than the
// agent's is the instance "c-" + a hash of node and service id, and keeps
// its Consul id in the label consul-service-id.
const (
	labelServiceID = "consul-service-id"
)

// NodeStore is what the node endpoints read and write: the KV kind's
// nodes (*kv.Store).
type NodeStore interface {
	Node(ns, name string) *kv.Node
	Nodes(ns string, fn func(*kv.Node) bool)
	UpdateNode(ctx context.Context, ns, name string, fn func(cur *kv.Node) (*kv.Node, error)) (int64, error)
}

func (a *API) nodeStore() NodeStore {
	ns, _ := a.opts.KV.(NodeStore)
	return ns
}

func (a *API) nodeRoutes() {
	if a.nodeStore() == nil {
		return // unsupported answers 501
	}
	a.handle("PUT /v1/catalog/register", a.catalogRegister)
	a.handle("PUT /v1/catalog/deregister", a.catalogDeregister)
	a.handle("GET /v1/catalog/nodes", a.catalogNodes)
	a.handle("GET /v1/catalog/node/{node}", a.catalogNode)
	a.handle("GET /v1/catalog/node-services/{node}", a.catalogNodeServices)
	a.handle("GET /v1/health/node/{node}", a.healthNode)
}

// serviceInstanceID is the instance id of Consul service id on node.
func (a *API) serviceInstanceID(node, id string) string {
	if node == a.opts.Node {
		return id
	}
	sum := sha256.Sum256([]byte(node + "\x00" + id))
	return "c-" + hex.EncodeToString(sum[:16])
}

// consulServiceID is the Consul id of in's service.
func consulServiceID(in *instance.Instance) string {
	if id, ok := in.Metadata.Get(labelServiceID); ok {
		return id
	}
	return in.ID
}

// nodeOf is the name of in's Consul node.
func (a *API) nodeOf(in *instance.Instance) string {
	if n, ok := in.Metadata.Get(labelNode); ok {
		return n
	}
	return in.Host
}

// selfNode is the agent's node.
func (a *API) selfNode() node {
	host, _, err := net.SplitHostPort(a.opts.Addr)
	if err != nil || host == "" || host == "::" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	meta := map[string]string{"consul-network-segment": "", "consul-version": "sextant " + a.opts.Version}
	for k, v := range a.opts.NodeMeta {
		meta[k] = v
	}
	tagged := map[string]string{"lan": host, "wan": host}
	if ip := net.ParseIP(host); ip != nil && ip.To4() != nil {
		tagged["lan_ipv4"], tagged["wan_ipv4"] = host, host
	} else if ip != nil {
		tagged["lan_ipv6"], tagged["wan_ipv6"] = host, host
	}
	return node{ID: a.nodeID(), Node: a.opts.Node, Address: host, Datacenter: a.opts.Datacenter,
		TaggedAddresses: tagged, Meta: meta, CreateIndex: 1, ModifyIndex: 1}
}

// nodeID is the agent node's id: a UUID derived from its name, stable
// across restarts.
func (a *API) nodeID() string {
	sum := sha256.Sum256([]byte("sextant-node\x00" + a.opts.Node))
	h := hex.EncodeToString(sum[:16])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func (a *API) toNodeOfRecord(n *kv.Node) node {
	out := node{ID: n.ID, Node: n.Name, Address: n.Address, Datacenter: a.opts.Datacenter,
		TaggedAddresses: n.TaggedAddresses, Meta: n.Meta, CreateIndex: n.CreateIndex, ModifyIndex: n.Index()}
	if out.TaggedAddresses == nil {
		out.TaggedAddresses = map[string]string{}
	}
	if out.Meta == nil {
		out.Meta = map[string]string{}
	}
	if n.Locality != nil {
		out.Locality = &locality{Region: n.Locality.Region, Zone: n.Locality.Zone}
	}
	return out
}

// nodeNamed is the node called name: the agent's, a registered one, or
// one named by the address of an instance; ok is false if there is none.
func (a *API) nodeNamed(name string) (node, bool) {
	if name == a.opts.Node {
		return a.selfNode(), true
	}
	if st := a.nodeStore(); st != nil {
		if n := st.Node(a.opts.Namespace, name); n != nil {
			return a.toNodeOfRecord(n), true
		}
	}
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			if a.nodeOf(in) == name {
				return a.implicitNode(in), true
			}
		}
	}
	return node{}, false
}

func (a *API) implicitNode(in *instance.Instance) node {
	return node{Node: in.Host, Address: in.Host, Datacenter: a.opts.Datacenter,
		TaggedAddresses: map[string]string{}, Meta: map[string]string{}, CreateIndex: in.Revision, ModifyIndex: in.Revision}
}

// allNodes are every node, in name order.
func (a *API) allNodes() []node {
	seen := map[string]bool{a.opts.Node: true}
	out := []node{a.selfNode()}
	if st := a.nodeStore(); st != nil {
		st.Nodes(a.opts.Namespace, func(n *kv.Node) bool {
			if !seen[n.Name] {
				seen[n.Name] = true
				out = append(out, a.toNodeOfRecord(n))
			}
			return true
		})
	}
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			if name := a.nodeOf(in); !seen[name] {
				seen[name] = true
				out = append(out, a.implicitNode(in))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// nodeServices are the instances on node name.
func (a *API) nodeServices(name string) []*instance.Instance {
	var out []*instance.Instance
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			if a.nodeOf(in) == name {
				out = append(out, in)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return consulServiceID(out[i]) < consulServiceID(out[j]) })
	return out
}

// nodeChecks are the checks of node name itself: serfHealth (the
// server's view: its own node, and each registered node, is alive while
// it answers) and those registered through the catalog.
func (a *API) nodeChecks(name string) []healthCheck {
	out := []healthCheck{}
	if name == a.opts.Node {
		out = append(out, healthCheck{Node: name, CheckID: serfHealth, Name: "Serf Health Status", Status: "passing",
			Output: "Agent alive and reachable", ServiceTags: []string{}, CreateIndex: 1, ModifyIndex: 1})
	}
	if st := a.nodeStore(); st != nil {
		if n := st.Node(a.opts.Namespace, name); n != nil {
			for _, c := range n.Checks {
				if c.ServiceID == "" {
					out = append(out, recordCheck(n, c, nil))
				}
			}
		}
	}
	return out
}

func recordCheck(n *kv.Node, c kv.Check, tags []string) healthCheck {
	if tags == nil {
		tags = []string{}
	}
	status, output := c.Current(time.Now())
	return healthCheck{Node: n.Name, CheckID: c.CheckID, Name: c.Name, Status: status, Notes: c.Notes, Output: output,
		ServiceID: c.ServiceID, ServiceName: c.ServiceName, ServiceTags: tags, Type: c.Type, Definition: c.Definition,
		CreateIndex: n.ModifyIndex, ModifyIndex: n.ModifyIndex}
}

// catalogChecks are the checks registered through the catalog on in's
// service (kept with its node's record).
func (a *API) catalogChecks(in *instance.Instance, tags []string) []healthCheck {
	st := a.nodeStore()
	name, ok := in.Metadata.Get(labelNode)
	if st == nil || !ok {
		return nil
	}
	n := st.Node(a.opts.Namespace, name)
	if n == nil {
		return nil
	}
	var out []healthCheck
	sid := consulServiceID(in)
	for _, c := range n.Checks {
		if c.ServiceID == sid {
			hc := recordCheck(n, c, tags)
			hc.ServiceName = in.Service
			out = append(out, hc)
		}
	}
	return out
}

// nodesFingerprint changes whenever a registered node does: it is part of
// the memo keys of answers that show their checks.
func (a *API) nodesFingerprint() string {
	st := a.nodeStore()
	if st == nil {
		return ""
	}
	var n, sum int64
	st.Nodes(a.opts.Namespace, func(x *kv.Node) bool {
		n++
		sum += x.ModifyIndex
		return true
	})
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("\x00n:%d:%d", n, sum)
}

// nodesIndex is the index of an answer about nodes: the largest of the
// namespace's instance revision and of the registered nodes'.
func (a *API) nodesIndex(index int64) int64 {
	if st := a.nodeStore(); st != nil {
		st.Nodes(a.opts.Namespace, func(x *kv.Node) bool {
			index = max(index, x.ModifyIndex)
			return true
		})
	}
	return max(index, 1)
}

// nodeMetaFilter reads ?node-meta=key:value (repeatable): a node must
// carry every pair.
func nodeMetaFilter(r *http.Request) (map[string]string, error) {
	vs := r.URL.Query()["node-meta"]
	if len(vs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, v := range vs {
		k, val, ok := strings.Cut(v, ":")
		if !ok || k == "" {
			return nil, badRequest(fmt.Sprintf("node-meta: %q is not key:value", v))
		}
		m[k] = val
	}
	return m, nil
}

func metaMatches(meta, want map[string]string) bool {
	for k, v := range want {
		if got, ok := meta[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// nodeRead checks a node read: the caller may read the namespace's
// services, the scope is the served one, the parameters parse.
func (a *API) nodeRead(r *http.Request, proto any) (int64, *filter, map[string]string, error) {
	_, b, f, err := a.readQuery(r, proto)
	if err != nil {
		return 0, nil, nil, err
	}
	meta, err := nodeMetaFilter(r)
	if err != nil {
		return 0, nil, nil, err
	}
	index, err := a.namespace(r, b)
	if err != nil {
		return 0, nil, nil, err
	}
	return a.nodesIndex(index), f, meta, nil
}

// GET /v1/catalog/nodes?node-meta=&filter=
func (a *API) catalogNodes(w http.ResponseWriter, r *http.Request) error {
	index, f, meta, err := a.nodeRead(r, &node{})
	if err != nil {
		return err
	}
	out := []node{}
	for _, n := range a.allNodes() {
		if !metaMatches(n.Meta, meta) {
			continue
		}
		ok, err := f.match(&n)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, n)
		}
	}
	a.setMeta(w, index)
	return writeJSON(w, out)
}

// catalogNodeAnswer is Consul's CatalogNode.
type catalogNodeAnswer struct {
	Node     *node
	Services map[string]agentService
}

// GET /v1/catalog/node/{node}: the node and its services by id (null
// for an unknown node, as Consul answers).
func (a *API) catalogNode(w http.ResponseWriter, r *http.Request) error {
	index, f, _, err := a.nodeRead(r, &agentService{})
	if err != nil {
		return err
	}
	a.setMeta(w, index)
	n, ok := a.nodeNamed(r.PathValue("node"))
	if !ok {
		return writeValue(w, "null")
	}
	out := catalogNodeAnswer{Node: &n, Services: map[string]agentService{}}
	for _, in := range a.nodeServices(n.Node) {
		s := a.catalogAgentService(in)
		ok, err := f.match(&s)
		if err != nil {
			return err
		}
		if ok {
			out.Services[s.ID] = s
		}
	}
	return writeJSON(w, out)
}

// catalogAgentService is in as an AgentService of a catalog answer: its
// Consul id, with its indexes.
func (a *API) catalogAgentService(in *instance.Instance) agentService {
	tags, meta := tagsAndMeta(in)
	s := a.toAgentService(in, tags, meta)
	s.CreateIndex, s.ModifyIndex = in.Revision, in.Revision
	return s
}

// GET /v1/catalog/node-services/{node}: Consul's CatalogNodeServiceList.
func (a *API) catalogNodeServices(w http.ResponseWriter, r *http.Request) error {
	index, f, _, err := a.nodeRead(r, &agentService{})
	if err != nil {
		return err
	}
	a.setMeta(w, index)
	n, ok := a.nodeNamed(r.PathValue("node"))
	if !ok {
		return writeValue(w, "null")
	}
	out := struct {
		Node     *node
		Services []agentService
	}{Node: &n, Services: []agentService{}}
	for _, in := range a.nodeServices(n.Node) {
		s := a.catalogAgentService(in)
		ok, err := f.match(&s)
		if err != nil {
			return err
		}
		if ok {
			out.Services = append(out.Services, s)
		}
	}
	return writeJSON(w, out)
}

// GET /v1/health/node/{node}: the checks of the node and of its services.
func (a *API) healthNode(w http.ResponseWriter, r *http.Request) error {
	index, f, _, err := a.nodeRead(r, &healthCheck{})
	if err != nil {
		return err
	}
	name := r.PathValue("node")
	out := []healthCheck{}
	all := a.nodeChecks(name)
	for _, in := range a.nodeServices(name) {
		tags, _ := tagsAndMeta(in)
		all = append(all, a.checksOf(in, tags)...)
	}
	for _, c := range all {
		ok, err := f.match(&c)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, c)
		}
	}
	a.setMeta(w, index)
	return writeJSON(w, out)
}

// CatalogRegistration is a decoded PUT /v1/catalog/register body.
type CatalogRegistration struct {
	ID              string
	Node            string
	Address         string
	Datacenter      string
	TaggedAddresses map[string]string
	NodeMeta        map[string]string
	Locality        *kv.Locality
	Service         *catalogServiceDef
	Check           *catalogCheck
	Checks          []*catalogCheck
	SkipNodeUpdate  bool
	Partition       string
	Namespace       string
}

// catalogServiceDef is the AgentService of a catalog registration, as
// consul/api sends it (every field of its AgentService).
type catalogServiceDef struct {
	Kind              string
	ID                string
	Service           string
	Tags              []string
	Meta              map[string]string
	Port              int
	Ports             []servicePort
	Address           string
	SocketPath        string
	TaggedAddresses   map[string]serviceAddress
	Weights           *weights
	EnableTagOverride bool
	CreateIndex       uint64
	ModifyIndex       uint64
	ContentHash       string
	Proxy             json.RawMessage
	Connect           json.RawMessage
	PeerName          string
	AI                json.RawMessage
	Namespace         string
	Partition         string
	Datacenter        string
	Locality          *locality

	ConnectNative bool `json:"-"`
}

// catalogCheck is Consul's HealthCheck in a catalog registration. Its
// Definition is kept by Consul for display only; Sextant's catalog runs
// no check either, and drops it.
type catalogCheck struct {
	Node        string
	CheckID     string
	Name        string
	Status      string
	Notes       string
	Output      string
	ServiceID   string
	ServiceName string
	ServiceTags []string
	Type        string
	Namespace   string
	Partition   string
	ExposedPort int
	PeerName    string
	Definition  json.RawMessage
	CreateIndex uint64
	ModifyIndex uint64
}

// DecodeCatalogRegister decodes a PUT /v1/catalog/register body strictly
// (unknown members, a key given twice, trailing data are 400s) and checks
// what Consul checks: a node, an address unless SkipNodeUpdate, a
// service's name, each check's id and status.
func DecodeCatalogRegister(body []byte) (*CatalogRegistration, error) {
	reg := &CatalogRegistration{}
	if err := strictJSON(body, reg); err != nil {
		return nil, err
	}
	switch {
	case reg.Node == "":
		return nil, badRequest("Must provide node")
	case !validNodeName(reg.Node):
		return nil, badRequest(fmt.Sprintf("Node: %q is not a node name Sextant keeps: 1..128 bytes of [A-Za-z0-9._-]", reg.Node))
	case reg.Address == "" && !reg.SkipNodeUpdate:
		return nil, badRequest("Must provide address if SkipNodeUpdate is not set")
	case reg.Partition != "" && reg.Partition != "default":
		return nil, badRequest("Partition: admin partitions (Consul Enterprise) are not supported")
	case reg.Namespace != "" && reg.Namespace != "default":
		return nil, badRequest("Namespace: Consul Enterprise namespaces are not supported")
	}
	for k := range reg.NodeMeta {
		if strings.HasPrefix(k, reservedPrefix) {
			return nil, badRequest(fmt.Sprintf("NodeMeta: key %q: the prefix %q is reserved for Consul's own", k, reservedPrefix))
		}
	}
	if s := reg.Service; s != nil {
		if err := checkCatalogService(s); err != nil {
			return nil, err
		}
	}
	checks := reg.Checks
	if reg.Check != nil {
		checks = append([]*catalogCheck{reg.Check}, checks...)
	}
	for i, c := range checks {
		if c == nil {
			continue
		}
		path := fmt.Sprintf("Checks[%d]", i)
		switch {
		case c.CheckID == "" && c.Name == "":
			return nil, badRequest(path + ": missing CheckID (and Name)")
		case c.Status != "" && !instance.ValidStatus(c.Status):
			return nil, badRequest(fmt.Sprintf("%s.Status: %q is not passing, warning or critical", path, c.Status))
		case c.Node != "" && c.Node != reg.Node:
			return nil, badRequest(fmt.Sprintf("%s.Node: %q is not the registration's node %q", path, c.Node, reg.Node))
		}
	}
	return reg, nil
}

// checkCatalogService checks what Consul checks of a catalog service (a
// name), and what Sextant does not serve of it.
func checkCatalogService(s *catalogServiceDef) error {
	switch {
	case s.Service == "":
		return badRequest("Must provide service name (Service.Service)")
	case len(bytes.TrimSpace(s.Proxy)) > 0 && !isEmptyJSON(s.Proxy) && jsonKind(s.Proxy) != "an object":
		return badRequest("Service.Proxy: expected an object, got " + jsonKind(s.Proxy))
	case len(bytes.TrimSpace(s.Connect)) > 0 && !isEmptyJSON(s.Connect):
		var c struct{ Native bool }
		dec := json.NewDecoder(bytes.NewReader(s.Connect))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return badRequest("Service.Connect: only Native is supported (a Connect sidecar is not): " + strings.TrimPrefix(err.Error(), "json: "))
		}
		s.ConnectNative = c.Native
	case s.PeerName != "":
		return badRequest("Service.PeerName: cluster peering is not supported")
	}
	return nil
}

func isEmptyJSON(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "null", "{}", "":
		return true
	}
	return false
}

// strictJSON decodes one JSON value of body into v: unknown members, a
// key given twice and trailing data are errors naming them.
func strictJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("empty body: a JSON object is required")
	}
	if err := duplicateKeys(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("body: " + strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("unexpected data after the JSON object")
	}
	return nil
}

// validNodeName: 1..128 bytes of [A-Za-z0-9._-].
func validNodeName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// PUT /v1/catalog/register: the node (unless SkipNodeUpdate and it
// exists), its service, its checks. The node record and the service's
// instance are two writes: the node first, so a service is never on a
// node that is not there.
func (a *API) catalogRegister(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	st, body, err := a.catalogWrite(w, r, "registers")
	if err != nil {
		return err
	}
	reg, err := DecodeCatalogRegister(body)
	if err != nil {
		return err
	}
	if reg.Datacenter != "" && reg.Datacenter != a.opts.Datacenter {
		return badRequest(fmt.Sprintf("No path to datacenter: dc %q (this API serves %q)", reg.Datacenter, a.opts.Datacenter))
	}
	if reg.Node == a.opts.Node && !reg.SkipNodeUpdate && reg.Address != "" {
		// The agent's node is this server: its address and meta are its
		// flags'. Services and checks may be added to it.
		reg.SkipNodeUpdate = true
	}
	var in *instance.Instance
	if s := reg.Service; s != nil {
		in, err = a.catalogInstance(reg)
		if err != nil {
			return err
		}
	}
	checks := reg.Checks
	if reg.Check != nil {
		checks = append([]*catalogCheck{reg.Check}, checks...)
	}
	var kchecks []kv.Check
	for i, c := range checks {
		if c == nil {
			continue
		}
		kc, err := kvCheck(c, fmt.Sprintf("Checks[%d]", i))
		if err != nil {
			return err
		}
		kchecks = append(kchecks, kc)
	}
	if reg.Node != a.opts.Node || len(checks) > 0 {
		if _, err := st.UpdateNode(r.Context(), ns, reg.Node, func(cur *kv.Node) (*kv.Node, error) {
			next := &kv.Node{}
			if cur != nil {
				*next = *cur
				next.Checks = slices.Clone(cur.Checks)
			}
			if cur == nil || !reg.SkipNodeUpdate {
				// SkipNodeUpdate of a node not there creates it, as Consul
				// does (its address may come with a later register).
				next.ID, next.Address, next.TaggedAddresses, next.Meta, next.Locality = reg.ID, reg.Address, reg.TaggedAddresses, reg.NodeMeta, reg.Locality
			}
			for _, kc := range kchecks {
				setCheck(next, kc)
			}
			keepNodeIndex(cur, next)
			return next, nil
		}); err != nil {
			return nodeError(err)
		}
	}
	if in != nil {
		if _, err := a.reg.RegisterGuarded(r.Context(), []*instance.Instance{in}, a.sameNamespace(r, in.ID)); err != nil {
			return err
		}
	}
	return writeValue(w, "true")
}

// catalogInstance is the instance of a catalog registration's service:
// on its node, at the node's address unless it has its own.
func (a *API) catalogInstance(reg *CatalogRegistration) (*instance.Instance, error) {
	s := reg.Service
	id := s.ID
	if id == "" {
		id = s.Service
	}
	r := &Registration{ID: a.serviceInstanceID(reg.Node, id), Name: s.Service, Address: s.Address, Port: s.Port, Tags: s.Tags,
		Meta: s.Meta, Kind: s.Kind, TaggedAddresses: s.TaggedAddresses, Locality: s.Locality, Ports: s.Ports, Node: reg.Node,
		ConnectNative: s.ConnectNative, EnableTagOverride: s.EnableTagOverride, Proxy: s.Proxy, SocketPath: s.SocketPath}
	if s.Weights != nil && s.Weights.Passing != 0 {
		// The client's CatalogRegistration sends {0, 0} for none.
		r.Weights = s.Weights
	}
	host := s.Address
	if host == "" {
		host = reg.Address
	}
	if host == "" {
		if n, ok := a.nodeNamed(reg.Node); ok {
			host = n.Address
		}
	}
	if host == "" {
		return nil, badRequest(fmt.Sprintf("Service.Address: node %q has no address yet: give the service an Address, or the node one", reg.Node))
	}
	if r.ID != id {
		r.ConsulID = id
	}
	in, err := r.Instance(a.opts.Namespace, host)
	if err != nil {
		var he *httpError
		if errors.As(err, &he) {
			he.msg = "Service." + he.msg
		}
		return nil, err
	}
	return in, nil
}

// PUT /v1/catalog/deregister: a check, a service, or the node with every
// service and check on it.
func (a *API) catalogDeregister(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	st, body, err := a.catalogWrite(w, r, "deregisters")
	if err != nil {
		return err
	}
	var d struct {
		Node, Address, Datacenter, ServiceID, CheckID, Namespace, Partition string
	}
	if err := strictJSON(body, &d); err != nil {
		return err
	}
	if d.Node == "" {
		return badRequest("Must provide node")
	}
	if d.Datacenter != "" && d.Datacenter != a.opts.Datacenter {
		return badRequest(fmt.Sprintf("No path to datacenter: dc %q (this API serves %q)", d.Datacenter, a.opts.Datacenter))
	}
	dropChecks := func(keep func(kv.Check) bool, deleteNode bool) error {
		_, err := st.UpdateNode(r.Context(), ns, d.Node, func(cur *kv.Node) (*kv.Node, error) {
			if cur == nil || deleteNode {
				return nil, nil
			}
			next := *cur
			next.Checks = slices.DeleteFunc(slices.Clone(cur.Checks), func(c kv.Check) bool { return !keep(c) })
			keepNodeIndex(cur, &next)
			return &next, nil
		})
		return nodeError(err)
	}
	switch {
	case d.CheckID != "":
		if err := dropChecks(func(c kv.Check) bool { return c.CheckID != d.CheckID }, false); err != nil {
			return err
		}
	case d.ServiceID != "":
		id := a.serviceInstanceID(d.Node, d.ServiceID)
		if in := a.reg.Instances().Get(id); in != nil && in.Namespace == ns {
			if _, _, err := a.reg.DeregisterGuarded(r.Context(), []string{id}, a.sameNamespace(r, id)); err != nil {
				return err
			}
		}
		if err := dropChecks(func(c kv.Check) bool { return c.ServiceID != d.ServiceID }, false); err != nil {
			return err
		}
	default:
		if d.Node == a.opts.Node {
			return badRequest(fmt.Sprintf("node %q is this server's own: deregister its services, not the node", d.Node))
		}
		var ids []string
		for _, in := range a.nodeServices(d.Node) {
			ids = append(ids, in.ID)
		}
		if len(ids) > 0 {
			if _, _, err := a.reg.DeregisterGuarded(r.Context(), ids, func(cur *instance.Instance) error {
				return a.sameNamespace(r, cur.ID)(cur)
			}); err != nil {
				return err
			}
		}
		if err := dropChecks(nil, true); err != nil {
			return err
		}
	}
	return writeValue(w, "true")
}

// setCheck adds check c to node n, or replaces the one of its id.
func setCheck(n *kv.Node, c kv.Check) {
	if i := slices.IndexFunc(n.Checks, func(x kv.Check) bool { return x.CheckID == c.CheckID }); i >= 0 {
		n.Checks[i] = c
	} else {
		n.Checks = append(n.Checks, c)
	}
}

// keepNodeIndex keeps the node's own index when a write changes only its
// checks: Consul's node ModifyIndex moves with the node, not its checks.
func keepNodeIndex(cur, next *kv.Node) {
	next.NodeIndex = 0
	if cur != nil && cur.ID == next.ID && cur.Address == next.Address && maps.Equal(cur.TaggedAddresses, next.TaggedAddresses) &&
		maps.Equal(cur.Meta, next.Meta) && reflect.DeepEqual(cur.Locality, next.Locality) {
		next.NodeIndex = cur.Index()
	}
}

func nodeError(err error) error {
	if errors.Is(err, kv.ErrTooLarge) {
		return &httpError{http.StatusRequestEntityTooLarge, strings.TrimPrefix(err.Error(), "kv: ")}
	}
	return err
}

// catalogWrite is what catalog register and deregister ask first: the
// token may write instances, the request names no other scope, node
// records can be kept (the KV store), and the body, read. what names the
// write in the refusal.
func (a *API) catalogWrite(w http.ResponseWriter, r *http.Request, what string) (NodeStore, []byte, error) {
	if err := acl.Require(r, instancesWrite(a.opts.Namespace)); err != nil {
		return nil, nil, err
	}
	if err := a.checkScope(r); err != nil {
		return nil, nil, err
	}
	st := a.nodeStore()
	if st == nil {
		return nil, nil, &httpError{http.StatusNotImplemented, "Sextant's Consul-compatible API does not serve catalog " + what + " without its KV store"}
	}
	body, err := readBody(w, r, MaxBody)
	if err != nil {
		return nil, nil, err
	}
	return st, body, nil
}
