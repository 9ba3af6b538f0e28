package consulapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// GET /v1/health/state/{state}?filter=: the checks of every service of the
// namespace in state (any, passing, warning or critical), as monitoring
// polls health/state/critical; blocking across the namespace.
func (a *API) healthState(w http.ResponseWriter, r *http.Request) error {
	state := r.PathValue("state")
	switch state {
	case "any", "passing", "warning", "critical":
	default:
		return badRequest(fmt.Sprintf("Invalid check state %q: any, passing, warning or critical", state))
	}
	_, b, f, err := a.readQuery(r, &healthCheck{})
	if err != nil {
		return err
	}
	index, err := a.namespace(r, b)
	if err != nil {
		return err
	}
	out := []healthCheck{}
	var all []healthCheck
	for _, n := range a.allNodes() {
		all = append(all, a.nodeChecks(n.Node)...)
	}
	for _, c := range all {
		if state != "any" && c.Status != state {
			continue
		}
		ok, err := f.match(&c)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, c)
		}
	}
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			tags, _ := tagsAndMeta(in)
			for _, c := range a.checksOf(in, tags) {
				if state != "any" && c.Status != state {
					continue
				}
				ok, err := f.match(&c)
				if err != nil {
					return err
				}
				if ok {
					out = append(out, c)
				}
			}
		}
	}
	a.setMeta(w, index)
	return writeJSON(w, out)
}

// agentChecksInfo is Consul's AgentServiceChecksInfo, an answer of the
// agent's local health endpoints.
type agentChecksInfo struct {
	AggregatedStatus string
	Service          *agentService
	Checks           []healthCheck
}

// statusCode is the HTTP status Consul's agent health endpoints answer for
// an aggregated status: its clients read the health from it.
func statusCode(status string) int {
	switch status {
	case "passing":
		return http.StatusOK
	case "warning":
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable // critical, maintenance
}

func (a *API) checksInfo(in *instance.Instance) agentChecksInfo {
	tags, meta := tagsAndMeta(in)
	s := a.toAgentService(in, tags, meta)
	s.ContentHash = strconv.FormatInt(in.Revision, 16)
	checks := a.checksOf(in, tags)
	return agentChecksInfo{AggregatedStatus: aggregate(checks), Service: &s, Checks: checks}
}

// agentHealthRead is what both agent health endpoints check first.
func (a *API) agentHealthRead(r *http.Request) (text bool, err error) {
	if err := acl.Require(r, instancesRead(a.opts.Namespace)); err != nil {
		return false, err
	}
	if err := a.checkScope(r); err != nil {
		return false, err
	}
	return r.URL.Query().Get("format") == "text", nil
}

// GET /v1/agent/health/service/id/{id}?format=text: one instance's
// aggregated health, in the status code (200 passing, 429 warning, 503
// critical or maintenance, 404 unknown) and the body.
func (a *API) agentHealthByID(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	text, err := a.agentHealthRead(r)
	if err != nil {
		return err
	}
	in := a.reg.Instances().Get(id)
	if in == nil || in.Namespace != a.opts.Namespace {
		reason := fmt.Sprintf("ServiceId %s not found", id)
		if text {
			return writeStatusText(w, http.StatusNotFound, reason)
		}
		return writeJSONStatus(w, http.StatusNotFound, agentChecksInfo{AggregatedStatus: "critical"})
	}
	info := a.checksInfo(in)
	if text {
		return writeStatusText(w, statusCode(info.AggregatedStatus), info.AggregatedStatus)
	}
	return writeJSONStatus(w, statusCode(info.AggregatedStatus), info)
}

// GET /v1/agent/health/service/name/{name}?format=text: the health of
// every instance of a service; the status code is the worst of theirs.
func (a *API) agentHealthByName(w http.ResponseWriter, r *http.Request) error {
	// A name Sextant cannot hold is a service not found (Consul's
	// client reads 404 as "critical, none"), not a 400.
	name := r.PathValue("name")
	text, err := a.agentHealthRead(r)
	if err != nil {
		return err
	}
	code, status := http.StatusNotFound, fmt.Sprintf("ServiceName %s Not Found", name)
	out := []agentChecksInfo{}
	if svc := a.reg.Instances().Lookup(naming.ServiceKey{Namespace: a.opts.Namespace, Name: name}); svc != nil {
		for _, in := range svc.Items() {
			info := a.checksInfo(in)
			out = append(out, info)
			// passing (200) < warning (429) < critical (503), as Consul ranks them.
			if c := statusCode(info.AggregatedStatus); code == http.StatusNotFound || c > code {
				code, status = c, info.AggregatedStatus
			}
		}
	}
	if text {
		return writeStatusText(w, code, status)
	}
	return writeJSONStatus(w, code, out)
}

// writeStatusText answers a status as Consul's ?format=text does: the
// word alone, with the status code.
func writeStatusText(w http.ResponseWriter, code int, body string) error {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(code)
	w.Write([]byte(body))
	return nil
}

func writeJSONStatus(w http.ResponseWriter, code int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header()["Content-Type"] = contentTypeJSON
	w.WriteHeader(code)
	w.Write(b)
	return nil
}
