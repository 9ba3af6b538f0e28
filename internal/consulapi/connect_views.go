package consulapi

import (
	"encoding/json"
	"net/http"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// Connect's views of the catalog (/v1/catalog/connect/{service},
// /v1/health/connect/{service}): the instances that take a service's
// Connect traffic, its connect-proxies (Kind connect-proxy whose
// Proxy.DestinationServiceName is the service) and its Connect-native
// instances, as kept by the register (reserved labels, attrs.go). Sextant
// configures no proxy from them: they are the records Consul's clients
// look up.

// connectsTo reports whether in takes service name's Connect traffic.
func connectsTo(in *instance.Instance, name string) bool {
	at := attrsOf(in)
	if at.ConnectNative && in.Service == name {
		return true
	}
	if at.Kind != "connect-proxy" || at.Proxy == nil {
		return false
	}
	var p struct{ DestinationServiceName string }
	return json.Unmarshal(at.Proxy, &p) == nil && p.DestinationServiceName == name
}

// connectInstances are the served namespace's instances taking service
// name's Connect traffic, after a blocking wait across the namespace if
// the request asks, with the index of the answer.
func (a *API) connectInstances(r *http.Request, name string, b blocking) ([]*instance.Instance, int64, error) {
	index, err := a.namespace(r, b)
	if err != nil {
		return nil, 0, err
	}
	var out []*instance.Instance
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			if connectsTo(in, name) {
				out = append(out, in)
			}
		}
	}
	return out, index, nil
}

// GET /v1/catalog/connect/{name}?tag=&filter=&node-meta=
func (a *API) catalogConnect(w http.ResponseWriter, r *http.Request) error {
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
	ins, index, err := a.connectInstances(r, name, b)
	if err != nil {
		return err
	}
	out := []catalogService{}
	for _, in := range ins {
		if !tagged(in, q["tag"]) {
			continue
		}
		cs := a.toCatalogService(in)
		if !metaMatches(cs.NodeMeta, nm) {
			continue
		}
		ok, err := f.match(&cs)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, cs)
		}
	}
	a.setMeta(w, index)
	return writeJSON(w, out)
}

// GET /v1/health/connect/{name}?passing&tag=&filter=&node-meta=
func (a *API) healthConnect(w http.ResponseWriter, r *http.Request) error {
	h, err := a.parseHealthQuery(r)
	if err != nil {
		return err
	}
	ins, index, err := a.connectInstances(r, h.name, h.b)
	if err != nil {
		return err
	}
	out, err := a.healthEntries(h, ins)
	if err != nil {
		return err
	}
	a.setMeta(w, index)
	return writeJSON(w, out)
}
