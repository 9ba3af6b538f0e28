package consulapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// The mapping of Consul's checks onto the instance's (instance.Check):
// a service's Check and Checks become its instance's checks, which the
// server runs (http, tcp, grpc) or expects updates of (ttl); Consul's
// check updates set their status through the registry.

// applyChecks sets the checks of a registration on in, with Consul's
// default ids: service:<id> for a single check, service:<id>:N (from 1)
// for several.
func applyChecks(in *instance.Instance, defs []CheckDefinition) error {
	if len(defs) == 0 {
		return nil
	}
	defaultCheckIDs(in.ID, in.Service, defs)
	checks := make([]instance.Check, len(defs))
	for i, d := range defs {
		path := "Checks[" + strconv.Itoa(i) + "]"
		if len(defs) == 1 {
			path = "Check"
		}
		switch {
		case d.UseTLS:
			return badRequest(path + ": TCPUseTLS and GRPCUseTLS are not supported (an https:// HTTP check is)")
		case d.Body != "":
			return badRequest(path + ".Body: HTTP check bodies are not supported")
		case d.TLSServerName != "":
			return badRequest(path + ".TLSServerName: is not supported (the URL's host is the server name)")
		case d.FailuresBeforeWarning > 0 && d.FailuresBeforeWarning != d.FailuresBeforeCritical:
			return badRequest(path + ".FailuresBeforeWarning: a warning threshold of its own is not supported (a failing probe turns critical after FailuresBeforeCritical)")
		}
		c := instance.Check{
			ID: d.ID, Name: d.Name, Type: d.Type, Target: d.Target, Method: d.Method, Header: d.Header,
			TLSSkipVerify: d.TLSSkipVerify, Interval: d.Interval, Timeout: d.Timeout, TTL: d.TTL,
			SuccessBeforePassing: d.SuccessBeforePassing, FailuresBeforeCritical: d.FailuresBeforeCritical,
			DeregisterCriticalServiceAfter: d.DeregisterCriticalServiceAfter, Status: d.Status,
		}
		if c.Type == instance.CheckGRPC {
			// Consul's GRPC is host:port, or host:port/service.
			c.Target, c.GRPCService, _ = strings.Cut(d.Target, "/")
		}
		checks[i] = c
	}
	in.Checks = checks
	return nil
}

// checksOf are the checks of in as Consul shows them: isolation (as
// maintenance), Sextant's heartbeat when the instance has a TTL, then its
// own checks.
func (a *API) checksOf(in *instance.Instance, tags []string) []healthCheck {
	out := a.baseChecks(in, tags)
	for i := range in.Checks {
		c := &in.Checks[i]
		out = append(out, healthCheck{Node: a.nodeOf(in), CheckID: c.ID, Name: c.Name, Status: c.Status, Output: c.Output,
			ServiceID: consulServiceID(in), ServiceName: in.Service, ServiceTags: tags, Type: c.Type,
			CreateIndex: in.Revision, ModifyIndex: in.Revision})
	}
	for _, c := range scriptChecksOf(in) {
		out = append(out, healthCheck{Node: a.nodeOf(in), CheckID: c.ID, Name: c.Name, Status: c.Status, Notes: c.Notes,
			ServiceID: consulServiceID(in), ServiceName: in.Service, ServiceTags: tags, Type: c.Type,
			CreateIndex: in.Revision, ModifyIndex: in.Revision})
	}
	return append(out, a.catalogChecks(in, tags)...)
}

// checkOwner finds the instance of the served namespace with check id:
// service:<instance>[:N] names it; any other id is looked for among the
// namespace's instances (Consul's check ids are the agent's, not the
// service's), and must be unique there.
func (a *API) checkOwner(checkID string) (*instance.Instance, error) {
	inst := a.reg.Instances()
	if rest, ok := strings.CutPrefix(checkID, "service:"); ok {
		for _, id := range []string{rest, rest[:max(strings.LastIndexByte(rest, ':'), 0)]} {
			if in := inst.Get(id); in != nil && in.Namespace == a.opts.Namespace && hasCheck(in, checkID) {
				return in, nil
			}
		}
	}
	var found *instance.Instance
	for _, svc := range inst.Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			if !hasCheck(in, checkID) {
				continue
			}
			if found != nil {
				return nil, &httpError{http.StatusConflict, fmt.Sprintf("check ID %q is a check of both %q and %q: give checks ids of their own, or use the default service:<id>", checkID, found.ID, in.ID)}
			}
			found = in
		}
	}
	if found == nil {
		return nil, notFound(fmt.Sprintf("Unknown check ID %q", checkID))
	}
	return found, nil
}

// checkUpdate serves /v1/agent/check/pass|warn|fail/{id}?note= and, with
// status "", /v1/agent/check/update/{id} (body {"Status","Output"}): the
// status of a TTL check, which also renews it unless critical.
func (a *API) checkUpdate(fixed string) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		// Each request's own: the update endpoint reads it from the body.
		status := fixed
		checkID := r.PathValue("id")
		if err := acl.Require(r, instancesWrite(a.opts.Namespace)); err != nil {
			return err
		}
		output := r.URL.Query().Get("note")
		if status == "" {
			var body struct {
				Status, Output string
			}
			b, err := readBody(w, r, MaxBody)
			if err != nil {
				return err
			}
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				return badRequest("body: want {\"Status\": \"passing|warning|critical\", \"Output\": \"...\"}: " + strings.TrimPrefix(err.Error(), "json: "))
			}
			if err := duplicateKeys(b); err != nil {
				return err
			}
			if !instance.ValidStatus(body.Status) {
				return badRequest(fmt.Sprintf("Status: %q is not passing, warning or critical", body.Status))
			}
			status, output = body.Status, body.Output
		}
		in, err := a.checkOwner(checkID)
		var he *httpError
		if errors.As(err, &he) && he.status == http.StatusNotFound {
			// A TTL check of the agent's node (agentcheck.go)?
			if found, err := a.nodeCheckUpdate(r, checkID, status, output); found || err != nil {
				if err != nil {
					return err
				}
				return writeValue(w, "")
			}
		}
		if err != nil {
			return err
		}
		if c := in.Check(checkID); c == nil || c.Type != instance.CheckTTL {
			typ := "script"
			if c != nil {
				typ = c.Type
			}
			return badRequest(fmt.Sprintf("check %q is a %s check, not a TTL check: only TTL checks are updated", checkID, typ))
		}
		if _, err := a.reg.SetCheck(r.Context(), in.ID, checkID, status, output); err != nil {
			if errors.Is(err, registry.ErrNotFound) {
				return notFound(fmt.Sprintf("Unknown check ID %q", checkID))
			}
			return err
		}
		return writeValue(w, "")
	}
}
