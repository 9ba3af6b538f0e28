package consulapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/dnsapi"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// The answers' shapes, as Consul's API writes them (field names are
// Consul's JSON names).

type weights struct {
	Passing int
	Warning int
}

// agentService is Consul's AgentService: a service instance.
type agentService struct {
	Kind              string `json:",omitempty"`
	ID                string
	Service           string
	Tags              []string
	Meta              map[string]string
	Port              int
	Ports             []servicePort `json:",omitempty"`
	Address           string
	SocketPath        string                    `json:",omitempty"`
	TaggedAddresses   map[string]serviceAddress `json:",omitempty"`
	Weights           weights
	EnableTagOverride bool
	Connect           *connectInfo    `json:",omitempty"`
	Proxy             json.RawMessage `json:",omitempty"`
	Datacenter        string
	ContentHash       string    `json:",omitempty"`
	CreateIndex       int64     `json:",omitempty"`
	ModifyIndex       int64     `json:",omitempty"`
	Locality          *locality `json:",omitempty"`
}

// connectInfo is Consul's AgentServiceConnect: only Native is kept.
type connectInfo struct {
	Native bool `json:",omitempty"`
}

// serviceAddressOf is the ServiceAddress Consul answers: "" for a service
// registered without one.
func serviceAddressOf(in *instance.Instance, at attrs) string {
	if at.NoAddress {
		return ""
	}
	return in.Host
}

// node is Consul's Node. Sextant has no nodes: each address is a node of
// its own, named by it.
type node struct {
	ID              string
	Node            string
	Address         string
	Datacenter      string
	TaggedAddresses map[string]string
	Meta            map[string]string
	CreateIndex     int64
	ModifyIndex     int64
	Locality        *locality `json:",omitempty"`
}

// catalogService is Consul's CatalogService (a ServiceNode).
type catalogService struct {
	ID                       string
	Node                     string
	Address                  string
	Datacenter               string
	TaggedAddresses          map[string]string
	NodeMeta                 map[string]string
	ServiceKind              string
	ServiceID                string
	ServiceName              string
	ServiceTags              []string
	ServiceAddress           string
	ServiceTaggedAddresses   map[string]serviceAddress `json:",omitempty"`
	ServiceMeta              map[string]string
	ServicePort              int
	ServicePorts             []servicePort `json:",omitempty"`
	ServiceWeights           weights
	ServiceEnableTagOverride bool
	ServiceProxy             json.RawMessage `json:",omitempty"`
	ServiceConnect           connectInfo
	ServiceLocality          *locality `json:",omitempty"`
	CreateIndex              int64
	ModifyIndex              int64
}

// healthCheck is Consul's HealthCheck.
type healthCheck struct {
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
	// Definition, of a check registered through the catalog: as
	// registered (checkdef.go).
	Definition  json.RawMessage `json:",omitempty"`
	CreateIndex int64
	ModifyIndex int64
}

// serviceEntry is Consul's ServiceEntry, an answer of /v1/health/service.
type serviceEntry struct {
	Node    node
	Service agentService
	Checks  []healthCheck
}

// tagsAndMeta splits an instance's labels into Consul's tags (metadata
// keys under tag/, in key order) and Meta (the other labels, the version
// among them).
func tagsAndMeta(in *instance.Instance) ([]string, map[string]string) {
	tags := []string{}
	meta := map[string]string{}
	for k, v := range in.Labels().All() {
		if t, ok := strings.CutPrefix(k, dnsapi.TagPrefix); ok {
			tags = append(tags, t)
			continue
		}
		if reserved(k) {
			continue // Consul's own fields (attrs.go)
		}
		meta[k] = v
	}
	return tags, meta
}

func (a *API) toAgentService(in *instance.Instance, tags []string, meta map[string]string) agentService {
	at := attrsOf(in)
	s := agentService{
		Kind: at.Kind, ID: consulServiceID(in), Service: in.Service, Tags: tags, Meta: meta, Port: in.Port, Ports: at.Ports, Address: in.Host,
		TaggedAddresses: at.TaggedAddresses, Weights: weightsOf(in), Datacenter: a.opts.Datacenter,
		Locality: at.Locality, EnableTagOverride: at.TagOverride, Proxy: at.Proxy, SocketPath: at.SocketPath,
	}
	if at.NoAddress {
		s.Address = ""
	}
	if at.ConnectNative {
		s.Connect = &connectInfo{Native: true}
	}
	return s
}

// toNode is the node in is on.
func (a *API) toNode(in *instance.Instance) node {
	if name, ok := in.Metadata.Get(labelNode); ok {
		if n, ok := a.nodeNamed(name); ok {
			return n
		}
		// A node deregistered under its service (two writes): named alone.
		return node{Node: name, Address: in.Host, Datacenter: a.opts.Datacenter,
			TaggedAddresses: map[string]string{}, Meta: map[string]string{}, CreateIndex: in.Revision, ModifyIndex: in.Revision}
	}
	return a.implicitNode(in)
}

func (a *API) toCatalogService(in *instance.Instance) catalogService {
	tags, meta := tagsAndMeta(in)
	n := a.toNode(in)
	at := attrsOf(in)
	return catalogService{
		ID: n.ID, Node: n.Node, Address: n.Address, Datacenter: a.opts.Datacenter,
		TaggedAddresses: n.TaggedAddresses, NodeMeta: n.Meta, ServiceKind: at.Kind,
		ServiceID: consulServiceID(in), ServiceName: in.Service, ServiceTags: tags, ServiceAddress: serviceAddressOf(in, at),
		ServiceTaggedAddresses: at.TaggedAddresses, ServiceMeta: meta, ServicePort: in.Port, ServicePorts: at.Ports,
		ServiceWeights: weightsOf(in), ServiceLocality: at.Locality, ServiceEnableTagOverride: at.TagOverride, ServiceProxy: at.Proxy,
		ServiceConnect: connectInfo{Native: at.ConnectNative}, CreateIndex: in.Revision, ModifyIndex: in.Revision,
	}
}

// asNodeService turns s into the AgentService Consul answers of a
// catalog record (its NodeService): no datacenter, Proxy and Connect
// always there, empty when none.
func asNodeService(s *agentService) {
	s.Datacenter = ""
	if s.Connect == nil {
		s.Connect = &connectInfo{}
	}
	if len(s.Proxy) == 0 {
		s.Proxy = json.RawMessage("{}")
	}
}

func (a *API) toEntry(in *instance.Instance) serviceEntry {
	tags, meta := tagsAndMeta(in)
	s := a.toAgentService(in, tags, meta)
	s.CreateIndex, s.ModifyIndex = in.Revision, in.Revision
	asNodeService(&s)
	n := a.toNode(in)
	return serviceEntry{Node: n, Service: s, Checks: append(a.nodeChecks(n.Node), a.checksOf(in, tags)...)}
}

// aggregate is Consul's aggregated status of checks: maintenance, then
// critical, then warning, else passing (no checks: passing).
func aggregate(checks []healthCheck) string {
	status := "passing"
	for _, c := range checks {
		switch {
		case strings.HasPrefix(c.CheckID, maintenancePrefix), c.CheckID == nodeMaintenance:
			return "maintenance"
		case c.Status == "critical":
			status = "critical"
		case c.Status == "warning" && status == "passing":
			status = "warning"
		}
	}
	return status
}

// maintenancePrefix starts the id of the check Consul shows for a service
// in maintenance, which is an isolated instance here.
const maintenancePrefix = "_service_maintenance:"

// baseChecks are the checks Sextant's own health shows as: isolation
// (Consul's maintenance mode) and the TTL heartbeat of Sextant's API.
func (a *API) baseChecks(in *instance.Instance, tags []string) []healthCheck {
	out := []healthCheck{}
	if in.Isolated {
		notes := "isolated in Sextant (maintenance mode)"
		if reason, ok := in.Metadata.Get(labelMaintenance); ok {
			notes = reason
		}
		out = append(out, healthCheck{Node: a.nodeOf(in), CheckID: maintenancePrefix + consulServiceID(in), Name: "Service Maintenance Mode",
			Status: "critical", Notes: notes, ServiceID: consulServiceID(in), ServiceName: in.Service,
			ServiceTags: tags, Type: "maintenance", CreateIndex: in.Revision, ModifyIndex: in.Revision})
	}
	if in.TTLSeconds > 0 {
		c := healthCheck{Node: a.nodeOf(in), CheckID: heartbeatPrefix + in.ID, Name: "Sextant TTL heartbeat",
			Status: "passing", ServiceID: consulServiceID(in), ServiceName: in.Service, ServiceTags: tags, Type: "ttl",
			CreateIndex: in.Revision, ModifyIndex: in.Revision}
		if in.TTLExpired {
			c.Status = "critical"
			c.Output = fmt.Sprintf("no heartbeat for 3 x ttl_seconds (%ds)", in.TTLSeconds)
		}
		out = append(out, c)
	}
	return out
}

// heartbeatPrefix starts the id of the check that shows an instance's
// TTL heartbeat (Sextant's API, ttl_seconds).
const heartbeatPrefix = "sextant-heartbeat:"

// readQuery is what every read of the served namespace checks first: the
// caller may read it, the scope is the served one, the blocking and
// filter parameters parse.
func (a *API) readQuery(r *http.Request, proto any) (url.Values, blocking, *filter, error) {
	if err := acl.Require(r, instancesRead(a.opts.Namespace)); err != nil {
		return nil, blocking{}, nil, err
	}
	if err := a.checkScope(r); err != nil {
		return nil, blocking{}, nil, err
	}
	q := r.URL.Query()
	b, err := parseBlocking(q)
	if err != nil {
		return nil, b, nil, err
	}
	f, err := parseFilter(q.Get("filter"))
	if err == nil {
		err = f.check(proto)
	}
	if err != nil {
		return nil, b, nil, err
	}
	return q, b, f, nil
}

// serviceName reads the {name} of a path: a Sextant service name (any
// other cannot exist, so it is a 400 rather than an empty answer).
func serviceName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if !naming.ValidName(name) {
		return "", badRequest(fmt.Sprintf("%q is not a valid Sextant service name: 1..128 chars of [a-z0-9-._], starting and ending with a letter or digit", name))
	}
	return name, nil
}

// tagged reports whether in carries every tag of tags.
func tagged(in *instance.Instance, tags []string) bool {
	for _, t := range tags {
		if !dnsapi.HasTag(in, t) {
			return false
		}
	}
	return true
}

// boolParam reads a Consul flag parameter: present without a value is
// true ("?passing").
func boolParam(q url.Values, name string) (bool, error) {
	vs, ok := q[name]
	if !ok {
		return false, nil
	}
	if len(vs) == 0 || vs[0] == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(vs[0])
	if err != nil {
		return false, badRequest(fmt.Sprintf("%s: %q is not a boolean", name, vs[0]))
	}
	return b, nil
}

// GET /v1/catalog/service/{name}?tag=&filter=
func (a *API) catalogService(w http.ResponseWriter, r *http.Request) error {
	name, err := serviceName(r)
	if err != nil {
		return err
	}
	q, b, f, err := a.readQuery(r, &catalogService{})
	if err != nil {
		return err
	}
	nm, err := nodeMetaFilter(r)
	if err != nil {
		return err
	}
	svc, err := a.service(r, name, b)
	if err != nil {
		return err
	}
	body, err := memoJSON(svc, memoKey("c", false, q, a.nodesFingerprint()), func() (any, error) {
		out := []catalogService{}
		for _, in := range svc.Items() {
			if !tagged(in, q["tag"]) {
				continue
			}
			cs := a.toCatalogService(in)
			if !metaMatches(cs.NodeMeta, nm) {
				continue
			}
			ok, err := f.match(&cs)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, cs)
			}
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	a.setMeta(w, serviceIndex(svc))
	cacheHeaders(w, q)
	return writeBytes(w, body)
}

// cacheHeaders answers a ?cached read as Consul's agent cache does: every
// answer comes from the server's in-memory catalog, current, so it is a
// hit of age 0.
func cacheHeaders(w http.ResponseWriter, q url.Values) {
	if has(q, "cached") {
		w.Header().Set("X-Cache", "HIT")
		w.Header().Set("Age", "0")
	}
}

// memoJSON is the JSON of what build answers for service svc (nil: an
// empty list), built once per version of the service and key: the many
// readers a change wakes, or that poll one query, encode it once.
func memoJSON(svc *registry.Service, key string, build func() (any, error)) ([]byte, error) {
	if svc == nil {
		return emptyList, nil
	}
	var berr error
	encode := func() []byte {
		v, err := build()
		if err != nil {
			berr = err
			return nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			berr = err
			return nil
		}
		return b
	}
	b := svc.Memo(key, encode)
	if b == nil && berr == nil {
		b = encode() // an earlier build of this key failed: its error is this one's
	}
	if berr != nil {
		return nil, berr
	}
	return b, nil
}

var emptyList = []byte("[]")

// memoKey names an answer of a service's version: the endpoint, passing,
// the tags and the filter.
func memoKey(endpoint string, passing bool, q url.Values, nodes string) string {
	var sb strings.Builder
	sb.WriteString("consul/")
	sb.WriteString(endpoint)
	if passing {
		sb.WriteString("/passing")
	}
	for _, t := range q["tag"] {
		sb.WriteString("\x00t:")
		sb.WriteString(strings.ToLower(t))
	}
	if f := q.Get("filter"); f != "" {
		sb.WriteString("\x00f:")
		sb.WriteString(f)
	}
	for _, m := range q["node-meta"] {
		sb.WriteString("\x00m:")
		sb.WriteString(m)
	}
	sb.WriteString(nodes)
	return sb.String()
}

// GET /v1/health/service/{name}?passing&tag=&filter=
func (a *API) healthService(w http.ResponseWriter, r *http.Request) error {
	h, err := a.parseHealthQuery(r)
	if err != nil {
		return err
	}
	svc, err := a.service(r, h.name, h.b)
	if err != nil {
		return err
	}
	body, err := memoJSON(svc, memoKey("h", h.passing, h.q, a.nodesFingerprint()), func() (any, error) {
		return a.healthEntries(h, svc.Items())
	})
	if err != nil {
		return err
	}
	a.setMeta(w, serviceIndex(svc))
	cacheHeaders(w, h.q)
	return writeBytes(w, body)
}

// healthQuery is what a health read of a service asks: its name, the
// blocking wait, ?tag, ?passing, ?node-meta and ?filter.
type healthQuery struct {
	name    string
	q       url.Values
	b       blocking
	f       *filter
	nm      map[string]string
	passing bool
}

func (a *API) parseHealthQuery(r *http.Request) (*healthQuery, error) {
	h := &healthQuery{}
	var err error
	if h.name, err = serviceName(r); err != nil {
		return nil, err
	}
	if h.q, h.b, h.f, err = a.readQuery(r, &serviceEntry{}); err != nil {
		return nil, err
	}
	if h.nm, err = nodeMetaFilter(r); err != nil {
		return nil, err
	}
	if h.passing, err = boolParam(h.q, "passing"); err != nil {
		return nil, err
	}
	return h, nil
}

// healthEntries are the entries of items that h selects.
func (a *API) healthEntries(h *healthQuery, items []*instance.Instance) ([]serviceEntry, error) {
	out := []serviceEntry{}
	for _, in := range items {
		if !tagged(in, h.q["tag"]) || h.passing && !in.ItemReady() {
			continue
		}
		e := a.toEntry(in)
		if h.passing && aggregate(e.Checks) != "passing" || !metaMatches(e.Node.Meta, h.nm) {
			continue
		}
		ok, err := h.f.match(&e)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// GET /v1/health/checks/{name}?filter=
func (a *API) healthChecks(w http.ResponseWriter, r *http.Request) error {
	name, err := serviceName(r)
	if err != nil {
		return err
	}
	q, b, f, err := a.readQuery(r, &healthCheck{})
	if err != nil {
		return err
	}
	svc, err := a.service(r, name, b)
	if err != nil {
		return err
	}
	body, err := memoJSON(svc, memoKey("k", false, q, a.nodesFingerprint()), func() (any, error) {
		out := []healthCheck{}
		for _, in := range svc.Items() {
			tags, _ := tagsAndMeta(in)
			for _, c := range a.checksOf(in, tags) {
				ok, err := f.match(&c)
				if err != nil {
					return nil, err
				}
				if ok {
					out = append(out, c)
				}
			}
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	a.setMeta(w, serviceIndex(svc))
	cacheHeaders(w, q)
	return writeBytes(w, body)
}

// GET /v1/catalog/services?filter=: each service of the namespace with
// the union of its instances' tags.
func (a *API) catalogServices(w http.ResponseWriter, r *http.Request) error {
	_, b, f, err := a.readQuery(r, &catalogService{})
	if err != nil {
		return err
	}
	index, err := a.namespace(r, b)
	if err != nil {
		return err
	}
	nm, err := nodeMetaFilter(r)
	if err != nil {
		return err
	}
	snap := a.reg.Instances().Snapshot()
	out := map[string][]string{}
	for _, svc := range snap.Groups(a.opts.Namespace) {
		var tags []string
		matched := f == nil && nm == nil
		for _, in := range svc.Items() {
			if f != nil || nm != nil {
				cs := a.toCatalogService(in)
				ok := metaMatches(cs.NodeMeta, nm)
				if ok && f != nil {
					if ok, err = f.match(&cs); err != nil {
						return err
					}
				}
				if !ok {
					continue
				}
				matched = true
			}
			for k := range in.Metadata.All() {
				if t, ok := strings.CutPrefix(k, dnsapi.TagPrefix); ok && !slices.Contains(tags, t) {
					tags = append(tags, t)
				}
			}
		}
		if matched {
			slices.Sort(tags)
			if tags == nil {
				tags = []string{}
			}
			out[svc.Key.Name] = tags
		}
	}
	a.setMeta(w, index)
	return writeJSON(w, out)
}

// GET /v1/agent/services?filter=: every instance of the namespace (the
// whole registry is this "agent"), by id.
func (a *API) agentServices(w http.ResponseWriter, r *http.Request) error {
	_, b, f, err := a.readQuery(r, &agentService{})
	if err != nil {
		return err
	}
	index, err := a.namespace(r, b)
	if err != nil {
		return err
	}
	out := map[string]agentService{}
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			tags, meta := tagsAndMeta(in)
			s := a.toAgentService(in, tags, meta)
			ok, err := f.match(&s)
			if err != nil {
				return err
			}
			if ok {
				out[in.ID] = s
			}
		}
	}
	a.setMeta(w, index)
	return writeJSON(w, out)
}

// GET /v1/agent/checks?filter=: every check of the namespace, by id.
func (a *API) agentChecks(w http.ResponseWriter, r *http.Request) error {
	_, b, f, err := a.readQuery(r, &healthCheck{})
	if err != nil {
		return err
	}
	index, err := a.namespace(r, b)
	if err != nil {
		return err
	}
	out := map[string]healthCheck{}
	for _, c := range a.nodeChecks(a.opts.Node) {
		if c.CheckID == serfHealth {
			continue // the catalog's, not the agent's
		}
		ok, err := f.match(&c)
		if err != nil {
			return err
		}
		if ok {
			out[c.CheckID] = c
		}
	}
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			if a.nodeOf(in) != a.opts.Node || isSelf(in) {
				continue // the agent's checks are its node's; the consul service has none in Consul
			}
			tags, _ := tagsAndMeta(in)
			for _, c := range a.checksOf(in, tags) {
				ok, err := f.match(&c)
				if err != nil {
					return err
				}
				if ok {
					out[c.CheckID] = c
				}
			}
		}
	}
	a.setMeta(w, index)
	return writeJSON(w, out)
}

// GET /v1/agent/service/{id}: one instance of the namespace. Blocking
// with index (its service's revision) or Consul's hash (its
// ContentHash): a hash query answers once the service's content differs
// from the hash, or the wait passed.
func (a *API) agentService(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	q, b, _, err := a.readQuery(r, &agentService{})
	if err != nil {
		return err
	}
	in := a.reg.Instances().Get(id)
	if in == nil || in.Namespace != a.opts.Namespace {
		return notFound(fmt.Sprintf("unknown service ID: %s", id))
	}
	hash := q.Get("hash")
	if hash != "" {
		b.index = 0
	}
	if b.index > 0 {
		// Wait on its service; answer once the instance itself changed or
		// left, or the wait passed.
		if in, err = a.instanceAfter(r, in, b); err != nil {
			return err
		}
	}
	s := a.hashedAgentService(in)
	if hash != "" {
		deadline := time.Now().Add(b.wait)
		for s.ContentHash == hash {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			// Any change of its service wakes the wait; one that leaves
			// this instance as it was waits again.
			if in, err = a.instanceAfter(r, in, blocking{index: in.Revision, wait: left}); err != nil {
				return err
			}
			s = a.hashedAgentService(in)
		}
	}
	w.Header().Set("X-Consul-Contenthash", s.ContentHash)
	a.setMeta(w, in.Revision)
	return writeJSON(w, s)
}

// instanceAfter is instance in (by id) after its service changed past
// b.index, or b.wait passed; 404 once it is gone.
func (a *API) instanceAfter(r *http.Request, in *instance.Instance, b blocking) (*instance.Instance, error) {
	id := in.ID
	svc, err := a.service(r, in.Service, b)
	if err != nil {
		return nil, err
	}
	in = nil
	if svc != nil {
		in, _ = svc.Get(id)
	}
	if in == nil {
		return nil, notFound(fmt.Sprintf("unknown service ID: %s", id))
	}
	return in, nil
}

// hashedAgentService is in as Consul's agent answers one service, with
// its ContentHash.
func (a *API) hashedAgentService(in *instance.Instance) agentService {
	tags, meta := tagsAndMeta(in)
	s := a.toAgentService(in, tags, meta)
	s.ContentHash = contentHash(&s)
	return s
}

// GET /v1/agent/self: the agent's configuration as Consul's clients read
// it (Prometheus' consul_sd reads Config.Datacenter).
func (a *API) agentSelf(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Authenticated(r.Context()); err != nil {
		return err
	}
	n := a.selfNode()
	self := map[string]any{
		"Config": map[string]any{
			"Datacenter": a.opts.Datacenter, "NodeName": a.opts.Node, "NodeID": n.ID, "Server": true,
			"Revision": "", "Version": "sextant " + a.opts.Version, "PrimaryDatacenter": a.opts.Datacenter,
		},
		"Member": map[string]any{"Name": a.opts.Node, "Addr": a.opts.Addr, "Status": 1, "Tags": map[string]string{"dc": a.opts.Datacenter}},
		"Meta":   n.Meta,
		// What Consul's tools read of its full configuration: whether the
		// Connect CA endpoints answer (connect.go).
		"DebugConfig": map[string]any{"ConnectEnabled": a.opts.CA != nil,
			// Consul's names for enable_script_checks (scriptchecks.go).
			"EnableRemoteScriptChecks": a.opts.EnableScriptChecks, "EnableLocalScriptChecks": a.opts.EnableScriptChecks,
			// Sextant's own: --consul-config-file (configfile.go).
			"ConfigFiles": a.opts.ConfigFiles},
		"Stats": map[string]any{"runtime": map[string]string{"version": runtime.Version()}},
		"xDS":   nil,
	}
	return writeJSON(w, self)
}

func writeJSON(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeBytes(w, b)
}

// writeValue answers a JSON value already encoded ("" for Consul's empty
// 200 answers to writes).
func writeValue(w http.ResponseWriter, body string) error { return writeBytes(w, []byte(body)) }

var contentTypeJSON = []string{"application/json"}

// writeBytes answers body. A failed write (the client left) is not
// reported: the answer is committed, there is nothing else to send.
func writeBytes(w http.ResponseWriter, body []byte) error {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	if len(body) >= 2048 {
		// Said, not chunked: a large answer goes out in one write
		// (net/http computes a small one's itself).
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	w.WriteHeader(http.StatusOK)
	w.Write(body)
	return nil
}
