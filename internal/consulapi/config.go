package consulapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/kv"
)

// Consul's config entries (/v1/config): records of the KV kind
// (kv.ConfigKey), kept as given with Consul's CAS and indexes, and the
// views Consul builds on the gateways' ones (/v1/catalog/gateway-services,
// /v1/health/ingress). Sextant configures nothing from them: its mesh and
// gateways are configured by its own kinds (docs/compat.md).

// configKinds are the kinds accepted, with the name a singleton kind
// must have.
var configKinds = map[string]string{
	"service-defaults": "", "proxy-defaults": "global", "service-router": "", "service-splitter": "",
	"service-resolver": "", "ingress-gateway": "", "terminating-gateway": "", "service-intentions": "",
	"mesh": "mesh", "exported-services": "", "api-gateway": "", "http-route": "", "tcp-route": "",
	"inline-certificate": "", "file-system-certificate": "", "jwt-provider": "", "sameness-group": "",
	"control-plane-request-limit": "",
}

// maxConfigEntry bounds an entry's JSON.
const maxConfigEntry = 256 * 1024

func (a *API) configRoutes() {
	if a.opts.KV == nil {
		return // unsupported answers 501
	}
	a.handle("PUT /v1/config", a.configPut)
	a.handle("GET /v1/config/{kind}", a.configList)
	a.handle("GET /v1/config/{kind}/{name}", a.configGet)
	a.handle("DELETE /v1/config/{kind}/{name}", a.configDelete)
	a.handle("GET /v1/catalog/gateway-services/{gateway}", a.gatewayServices)
	a.handle("GET /v1/health/ingress/{name}", a.healthIngress)
}

// configPaths are served with the KV kind (config.go).
var configPaths = map[string]bool{
	"/v1/config": true, "/v1/config/": true, "/v1/catalog/gateway-services/": true, "/v1/health/ingress/": true,
}

// decodeConfigEntry decodes a config entry strictly enough to store it: a
// JSON object with a known Kind and a Name (members matched without
// regard to case, as Consul's decoder does); the rest is kept as given.
func decodeConfigEntry(body []byte) (kind, name string, entry map[string]json.RawMessage, err error) {
	if err := strictJSON(body, &entry); err != nil {
		return "", "", nil, err
	}
	seen := map[string]bool{}
	for k, v := range entry {
		nk := normalize(k)
		if seen[nk] {
			return "", "", nil, badRequest(fmt.Sprintf("%s: given twice (its name's case aside)", k))
		}
		seen[nk] = true
		switch nk {
		case "kind":
			err = json.Unmarshal(v, &kind)
		case "name":
			err = json.Unmarshal(v, &name)
		case "createindex", "modifyindex":
			delete(entry, k) // the store's, not the client's
		}
		if err != nil {
			return "", "", nil, badRequest(fmt.Sprintf("%s: expected a string, got %s", k, jsonKind(v)))
		}
	}
	single, ok := configKinds[kind]
	switch {
	case kind == "":
		return "", "", nil, badRequest("Kind: missing (service-defaults, proxy-defaults, ingress-gateway, terminating-gateway, ...)")
	case !ok:
		return "", "", nil, badRequest(fmt.Sprintf("Kind: invalid config entry kind %q", kind))
	case single != "" && name == "":
		name = single
	case single != "" && name != single:
		return "", "", nil, badRequest(fmt.Sprintf("Name: a %s entry is named %q", kind, single))
	case !validNodeName(name):
		return "", "", nil, badRequest(fmt.Sprintf("Name: %q is not a config entry name Sextant keeps: 1..128 bytes of [A-Za-z0-9._-]", name))
	}
	return kind, name, entry, nil
}

// PUT /v1/config?cas=N: true, or false when the CAS does not hold.
func (a *API) configPut(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	if err := acl.Require(r, instancesWrite(ns)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	body, err := readBody(w, r, maxConfigEntry)
	if err != nil {
		return err
	}
	kind, name, entry, err := decodeConfigEntry(body)
	if err != nil {
		return err
	}
	cas, err := casParam(r.URL.Query())
	if err != nil {
		return err
	}
	b, err := json.Marshal(entry)
	if err != nil {
		return fmt.Errorf("consulapi: config entry: %w", err)
	}
	tns, key := kv.ConfigKey(ns, kind, name)
	ok, rev, err := a.opts.KV.Put(r.Context(), kv.Put{Namespace: tns, Key: key, Value: b, CAS: cas})
	if err != nil {
		return kvError(err)
	}
	a.setMeta(w, rev)
	return writeValue(w, strconv.FormatBool(ok))
}

// DELETE /v1/config/{kind}/{name}?cas=N: true, or false when the CAS does
// not hold.
func (a *API) configDelete(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	if err := acl.Require(r, instancesWrite(ns)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	cas, err := casParam(r.URL.Query())
	if err != nil {
		return err
	}
	tns, key := kv.ConfigKey(ns, r.PathValue("kind"), r.PathValue("name"))
	ok, rev, err := a.opts.KV.Delete(r.Context(), tns, key, false, cas)
	if err != nil {
		return kvError(err)
	}
	a.setMeta(w, rev)
	return writeValue(w, strconv.FormatBool(ok))
}

// configAnswer is a stored entry with its indexes.
func configAnswer(e *kv.Entry) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(e.Value, &m); err != nil {
		return nil, fmt.Errorf("consulapi: config entry %q: %w", e.Key, err)
	}
	m["CreateIndex"] = json.RawMessage(strconv.FormatInt(e.CreateIndex, 10))
	m["ModifyIndex"] = json.RawMessage(strconv.FormatInt(e.ModifyIndex, 10))
	return m, nil
}

func (a *API) configRead(r *http.Request) error {
	if err := acl.Require(r, instancesRead(a.opts.Namespace)); err != nil {
		return err
	}
	return a.checkScope(r)
}

// GET /v1/config/{kind}/{name}: the entry, or 404.
func (a *API) configGet(w http.ResponseWriter, r *http.Request) error {
	if err := a.configRead(r); err != nil {
		return err
	}
	kind, name := r.PathValue("kind"), r.PathValue("name")
	e := a.opts.KV.Table().Get(kv.ConfigKey(a.opts.Namespace, kind, name))
	a.setMeta(w, max(a.opts.KV.Table().Revision(), 1))
	if e == nil {
		return &httpError{http.StatusNotFound, fmt.Sprintf("Config entry not found for %q / %q", kind, name)}
	}
	out, err := configAnswer(e)
	if err != nil {
		return err
	}
	return writeJSON(w, out)
}

// configEntries are the entries of kind, in name order.
func (a *API) configEntries(kind string) []*kv.Entry {
	var out []*kv.Entry
	tns, prefix := kv.ConfigPrefix(a.opts.Namespace, kind)
	a.opts.KV.Table().List(tns, prefix, func(e *kv.Entry) bool {
		out = append(out, e)
		return true
	})
	return out
}

// GET /v1/config/{kind}: every entry of the kind.
func (a *API) configList(w http.ResponseWriter, r *http.Request) error {
	if err := a.configRead(r); err != nil {
		return err
	}
	kind := r.PathValue("kind")
	if _, ok := configKinds[kind]; !ok {
		return badRequest(fmt.Sprintf("invalid config entry kind %q", kind))
	}
	out := []map[string]json.RawMessage{}
	for _, e := range a.configEntries(kind) {
		m, err := configAnswer(e)
		if err != nil {
			return err
		}
		out = append(out, m)
	}
	a.setMeta(w, max(a.opts.KV.Table().Revision(), 1))
	return writeJSON(w, out)
}

// gatewayService is Consul's GatewayService.
type gatewayService struct {
	Gateway      compoundName
	Service      compoundName
	GatewayKind  string
	Port         int      `json:",omitempty"`
	Protocol     string   `json:",omitempty"`
	Hosts        []string `json:",omitempty"`
	CAFile       string   `json:",omitempty"`
	CertFile     string   `json:",omitempty"`
	KeyFile      string   `json:",omitempty"`
	SNI          string   `json:",omitempty"`
	FromWildcard bool     `json:",omitempty"`
}

type compoundName struct{ Name string }

// ingressEntry and terminatingEntry are what the views read of the
// gateways' entries (encoding/json matches their members without regard
// to case).
type ingressEntry struct {
	Listeners []struct {
		Port     int
		Protocol string
		Services []struct {
			Name  string
			Hosts []string
		}
	}
}

type terminatingEntry struct {
	Services []struct{ Name, CAFile, CertFile, KeyFile, SNI string }
}

// gatewayServicesOf are the services gateway's entry (ingress or
// terminating) links, in service name order; a terminating gateway's
// "*" covers every typical service of the namespace not named otherwise
// (Consul's own "consul" aside).
func (a *API) gatewayServicesOf(gateway string) ([]gatewayService, error) {
	var out []gatewayService
	tbl := a.opts.KV.Table()
	if e := tbl.Get(kv.ConfigKey(a.opts.Namespace, "ingress-gateway", gateway)); e != nil {
		var ig ingressEntry
		if err := json.Unmarshal(e.Value, &ig); err != nil {
			return nil, fmt.Errorf("consulapi: ingress-gateway %q: %w", gateway, err)
		}
		for _, l := range ig.Listeners {
			proto := l.Protocol
			if proto == "" {
				proto = "tcp"
			}
			for _, s := range l.Services {
				out = append(out, gatewayService{Gateway: compoundName{gateway}, Service: compoundName{s.Name}, GatewayKind: "ingress-gateway",
					Port: l.Port, Protocol: proto, Hosts: s.Hosts})
			}
		}
	}
	if e := tbl.Get(kv.ConfigKey(a.opts.Namespace, "terminating-gateway", gateway)); e != nil {
		var tg terminatingEntry
		if err := json.Unmarshal(e.Value, &tg); err != nil {
			return nil, fmt.Errorf("consulapi: terminating-gateway %q: %w", gateway, err)
		}
		named := map[string]bool{}
		for _, s := range tg.Services {
			named[s.Name] = true
		}
		for _, s := range tg.Services {
			gs := gatewayService{Gateway: compoundName{gateway}, GatewayKind: "terminating-gateway", CAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile, SNI: s.SNI}
			if s.Name != "*" {
				gs.Service = compoundName{s.Name}
				out = append(out, gs)
				continue
			}
			for _, name := range a.typicalServices() {
				if !named[name] && name != gateway {
					gs.Service, gs.FromWildcard = compoundName{name}, true
					out = append(out, gs)
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Service.Name < out[j].Service.Name })
	return out, nil
}

// typicalServices are the names of the namespace's services of no kind
// (not proxies or gateways), Consul's own "consul" aside.
func (a *API) typicalServices() []string {
	var out []string
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			if in.Service != "consul" && attrsOf(in).Kind == "" {
				out = append(out, in.Service)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// GET /v1/catalog/gateway-services/{gateway}
func (a *API) gatewayServices(w http.ResponseWriter, r *http.Request) error {
	if err := a.configRead(r); err != nil {
		return err
	}
	out, err := a.gatewayServicesOf(r.PathValue("gateway"))
	if err != nil {
		return err
	}
	if out == nil {
		out = []gatewayService{}
	}
	a.setMeta(w, max(a.opts.KV.Table().Revision(), a.reg.Instances().Snapshot().Revision(), 1))
	return writeJSON(w, out)
}

// GET /v1/health/ingress/{service}: the ingress gateways' instances whose
// entry links the service (by name or "*"), as health/service answers.
func (a *API) healthIngress(w http.ResponseWriter, r *http.Request) error {
	if err := a.configRead(r); err != nil {
		return err
	}
	h, err := a.parseHealthQuery(r)
	if err != nil {
		return err
	}
	gateways := map[string]bool{}
	for _, e := range a.configEntries("ingress-gateway") {
		var ig ingressEntry
		if json.Unmarshal(e.Value, &ig) != nil {
			continue
		}
		_, prefix := kv.ConfigPrefix(a.opts.Namespace, "ingress-gateway")
		for _, l := range ig.Listeners {
			for _, s := range l.Services {
				if s.Name == h.name || s.Name == "*" {
					gateways[strings.TrimPrefix(e.Key, prefix)] = true
				}
			}
		}
	}
	var items []*instance.Instance
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			if gateways[in.Service] && attrsOf(in).Kind == "ingress-gateway" {
				items = append(items, in)
			}
		}
	}
	out, err := a.healthEntries(h, items)
	if err != nil {
		return err
	}
	a.setMeta(w, max(a.opts.KV.Table().Revision(), a.reg.Instances().Snapshot().Revision(), 1))
	return writeJSON(w, out)
}
