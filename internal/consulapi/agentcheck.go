package consulapi

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/kv"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Checks registered on their own (/v1/agent/check/register): one of a
// service becomes a check of its instance, which the server runs (or
// expects updates of, TTL) like the checks given with the service; one of
// the agent's node is kept in the node's record (node.go) and must be a
// TTL check, whose expiry is decided when it is read (no process runs
// it). Node maintenance (/v1/agent/maintenance) is the node check
// _node_maintenance, as in Consul.

const nodeMaintenance = "_node_maintenance"

func (a *API) agentCheckRoutes() {
	if a.nodeStore() == nil {
		return // unsupported answers 501
	}
	a.handle("PUT /v1/agent/check/register", a.agentCheckRegister)
	a.handle("PUT /v1/agent/check/deregister/{id}", a.agentCheckDeregister)
	a.handle("PUT /v1/agent/maintenance", a.nodeMaintenanceSet)
}

// PUT /v1/agent/check/register
func (a *API) agentCheckRegister(w http.ResponseWriter, r *http.Request) error {
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
	if err := duplicateKeys(body); err != nil {
		return err
	}
	def, err := decodeCheck(body, "")
	if err != nil {
		return err
	}
	if def.ID == "" {
		def.ID = def.Name
	}
	if def.ID == "" {
		return badRequest("missing check ID (or Name)")
	}
	if err := a.checkScripts([]CheckDefinition{def}); err != nil {
		return err
	}
	if def.ServiceID != "" {
		return a.serviceCheckRegister(w, r, def)
	}
	var c kv.Check
	switch {
	case isScript(def):
		// Kept, never run (scriptchecks.go).
		c = kv.Check{CheckID: def.ID, Name: def.Name, Notes: def.Notes, Status: def.Status, Type: def.Type}
	case def.Type == instance.CheckTTL:
		c = kv.Check{CheckID: def.ID, Name: def.Name, Notes: def.Notes, Status: def.Status, Type: "ttl", TTL: def.TTL,
			Expires: time.Now().Add(def.TTL).UnixNano()}
	default:
		return badRequest(fmt.Sprintf("a %s check of the node itself is not run by Sextant: give it a ServiceID, or make it a TTL check", def.Type))
	}
	if c.Status == "" {
		c.Status = "critical"
	}
	if _, err := a.nodeStore().UpdateNode(r.Context(), ns, a.opts.Node, func(cur *kv.Node) (*kv.Node, error) {
		next := a.agentNodeRecord(cur)
		if i := slices.IndexFunc(next.Checks, func(x kv.Check) bool { return x.CheckID == c.CheckID }); i >= 0 {
			next.Checks[i] = c
		} else {
			next.Checks = append(next.Checks, c)
		}
		return next, nil
	}); err != nil {
		return nodeError(err)
	}
	return writeValue(w, "")
}

// agentNodeRecord is a copy of the agent node's record, or a new one: it
// holds the agent's own node checks (its address is its flags').
func (a *API) agentNodeRecord(cur *kv.Node) *kv.Node {
	next := &kv.Node{}
	if cur != nil {
		*next = *cur
		next.Checks = slices.Clone(cur.Checks)
	}
	if next.Address == "" {
		next.Address = a.selfNode().Address
	}
	return next
}

// serviceCheckRegister adds def to the checks of its service's instance.
func (a *API) serviceCheckRegister(w http.ResponseWriter, r *http.Request, def CheckDefinition) error {
	cur := a.reg.Instances().Get(def.ServiceID)
	if cur == nil || cur.Namespace != a.opts.Namespace {
		return notFound(fmt.Sprintf("ServiceID %q does not exist", def.ServiceID))
	}
	in := cur.Clone()
	if isScript(def) {
		if err := setScriptCheck(in, def.ID, &def); err != nil {
			return err
		}
	} else {
		probe := cur.Clone()
		if err := applyChecks(probe, []CheckDefinition{def}); err != nil {
			return err
		}
		checks := slices.Clone(cur.Checks)
		if i := slices.IndexFunc(checks, func(c instance.Check) bool { return c.ID == def.ID }); i >= 0 {
			checks[i] = probe.Checks[0]
		} else {
			checks = append(checks, probe.Checks[0])
		}
		in.Checks = checks
	}
	if err := instance.Prepare(-1, in); err != nil {
		var fe *instance.FieldError
		if errors.As(err, &fe) {
			return badRequest(consulField(fe.Field) + ": " + fe.Msg)
		}
		return err
	}
	guard := a.sameNamespace(r, in.ID)
	if _, err := a.reg.RegisterGuarded(r.Context(), []*instance.Instance{in}, func(now *instance.Instance) error {
		if now.Revision != cur.Revision {
			return fmt.Errorf("consulapi: service %q changed while its check was added; retry: %w", in.ID, store.ErrConflict)
		}
		return guard(now)
	}); err != nil {
		return err
	}
	return writeValue(w, "")
}

// PUT /v1/agent/check/deregister/{id}
func (a *API) agentCheckDeregister(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	id := r.PathValue("id")
	if err := acl.Require(r, instancesWrite(ns)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	if n := a.nodeStore().Node(ns, a.opts.Node); n != nil && slices.ContainsFunc(n.Checks, func(c kv.Check) bool { return c.CheckID == id }) {
		if _, err := a.nodeStore().UpdateNode(r.Context(), ns, a.opts.Node, func(cur *kv.Node) (*kv.Node, error) {
			next := a.agentNodeRecord(cur)
			next.Checks = slices.DeleteFunc(next.Checks, func(c kv.Check) bool { return c.CheckID == id })
			return next, nil
		}); err != nil {
			return nodeError(err)
		}
		return writeValue(w, "")
	}
	owner, err := a.checkOwner(id)
	if err != nil {
		return err
	}
	in := owner.Clone()
	in.Checks = slices.DeleteFunc(slices.Clone(owner.Checks), func(c instance.Check) bool { return c.ID == id })
	if len(in.Checks) == 0 {
		in.Checks = nil
	}
	if err := setScriptCheck(in, id, nil); err != nil {
		return err
	}
	guard := a.sameNamespace(r, in.ID)
	if _, err := a.reg.RegisterGuarded(r.Context(), []*instance.Instance{in}, func(now *instance.Instance) error {
		if now.Revision != owner.Revision {
			return fmt.Errorf("consulapi: service %q changed while its check was removed; retry: %w", in.ID, store.ErrConflict)
		}
		return guard(now)
	}); err != nil {
		return err
	}
	return writeValue(w, "")
}

// nodeCheckUpdate sets the status of a TTL check of the agent's node and
// renews it; false if the node has no such check.
func (a *API) nodeCheckUpdate(r *http.Request, id, status, output string) (bool, error) {
	st := a.nodeStore()
	if st == nil {
		return false, nil
	}
	n := st.Node(a.opts.Namespace, a.opts.Node)
	if n == nil || !slices.ContainsFunc(n.Checks, func(c kv.Check) bool { return c.CheckID == id }) {
		return false, nil
	}
	_, err := st.UpdateNode(r.Context(), a.opts.Namespace, a.opts.Node, func(cur *kv.Node) (*kv.Node, error) {
		next := a.agentNodeRecord(cur)
		for i := range next.Checks {
			if c := &next.Checks[i]; c.CheckID == id {
				c.Status, c.Output = status, output
				if c.TTL > 0 {
					c.Expires = time.Now().Add(c.TTL).UnixNano()
				}
			}
		}
		return next, nil
	})
	return true, nodeError(err)
}

// PUT /v1/agent/maintenance?enable=&reason=
func (a *API) nodeMaintenanceSet(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	if err := acl.Require(r, instancesWrite(ns)); err != nil {
		return err
	}
	q := r.URL.Query()
	enable, err := strconv.ParseBool(q.Get("enable"))
	if err != nil {
		return badRequest(fmt.Sprintf("enable: %q is not a boolean (true or false)", q.Get("enable")))
	}
	notes := q.Get("reason")
	if notes == "" {
		notes = "Maintenance mode is enabled for this node, but no reason was provided. This is a default message."
	}
	if _, err := a.nodeStore().UpdateNode(r.Context(), ns, a.opts.Node, func(cur *kv.Node) (*kv.Node, error) {
		next := a.agentNodeRecord(cur)
		next.Checks = slices.DeleteFunc(next.Checks, func(c kv.Check) bool { return c.CheckID == nodeMaintenance })
		if enable {
			next.Checks = append(next.Checks, kv.Check{CheckID: nodeMaintenance, Name: "Node Maintenance Mode", Status: "critical", Notes: notes, Type: "maintenance"})
		}
		return next, nil
	}); err != nil {
		return nodeError(err)
	}
	return writeValue(w, "")
}
