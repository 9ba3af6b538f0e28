package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/ingress"
	"github.com/sextant-mesh/sextant/internal/jsonstring"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// Routing config (docs/api.md, "Routing config"): Istio VirtualServices and
// DestinationRules as records of the store's config kind.

func configTable(reg *backend) (*config.Table, error) {
	t, _ := reg.Catalog().Table(store.Config).(*config.Table)
	if t == nil {
		return nil, &apiError{http.StatusNotFound, "not_found", "routing config is not enabled on this server", ""}
	}
	return t, nil
}

// configKind reads a kind as a path segment: VirtualService or
// DestinationRule, in any case, singular or plural, or their short names.
func configKind(s string) (string, error) {
	switch strings.ToLower(s) {
	case "virtualservice", "virtualservices", "vs":
		return config.KindVirtualService, nil
	case "destinationrule", "destinationrules", "dr":
		return config.KindDestinationRule, nil
	case "gateway", "gateways", "gw":
		return config.KindGateway, nil
	case "serviceentry", "serviceentries", "se":
		return config.KindServiceEntry, nil
	case "workloadentry", "workloadentries", "we":
		return config.KindWorkloadEntry, nil
	case "sidecar", "sidecars":
		return config.KindSidecar, nil
	case "peerauthentication", "peerauthentications", "pa":
		return config.KindPeerAuthentication, nil
	case "authorizationpolicy", "authorizationpolicies", "ap":
		return config.KindAuthorizationPolicy, nil
	case "requestauthentication", "requestauthentications", "ra":
		return config.KindRequestAuthentication, nil
	case "telemetry", "telemetries":
		return config.KindTelemetry, nil
	}
	return "", badRequest("kind", "%q is not a config kind: VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication, AuthorizationPolicy, RequestAuthentication or Telemetry", s)
}

func configKeyOf(r *http.Request) (config.Key, error) {
	kind, err := configKind(r.PathValue("kind"))
	if err != nil {
		return config.Key{}, err
	}
	k, err := config.ParseKey(kind + "/" + r.PathValue("ns") + "/" + r.PathValue("name"))
	if err != nil {
		return config.Key{}, badRequest("name", "%s", strings.TrimPrefix(err.Error(), "config: "))
	}
	return k, nil
}

// optRevision reads ?revision=N, the precondition of a write.
func optRevision(r *http.Request) (*int64, error) {
	s := r.URL.Query().Get("revision")
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return nil, badRequest("revision", "%q is not a revision (a non-negative integer)", s)
	}
	return &n, nil
}

// configError maps the config package's errors to API errors.
func configError(err error) error {
	var fes config.Errors
	var fe *config.FieldError
	var ce *config.ClaimError
	var oe *config.OwnedError
	switch {
	case errors.As(err, &oe):
		return &apiError{http.StatusConflict, "conflict", strings.TrimPrefix(err.Error(), "config: "), "metadata.annotations[" + config.AnnotationOwner + "]"}
	case errors.As(err, &ce):
		return &apiError{http.StatusConflict, "conflict", strings.TrimPrefix(err.Error(), "config: "), ce.Path}
	case errors.As(err, &fes) && len(fes) > 0:
		return badRequest(fieldPath(fes[0]), "%s", strings.TrimPrefix(err.Error(), "config: "))
	case errors.As(err, &fe):
		return badRequest(fieldPath(fe), "%s", strings.TrimPrefix(err.Error(), "config: "))
	case errors.Is(err, config.ErrNotFound):
		return &apiError{http.StatusNotFound, "not_found", strings.TrimPrefix(err.Error(), "config: "), ""}
	case errors.Is(err, config.ErrStale):
		return &apiError{http.StatusConflict, "conflict", strings.TrimPrefix(err.Error(), "config: "), "revision"}
	case errors.Is(err, config.ErrConflict):
		// A WorkloadEntry's instance id registered by another writer.
		return &apiError{http.StatusConflict, "conflict", strings.TrimPrefix(err.Error(), "config: "), "metadata.name"}
	case errors.Is(err, config.ErrInvalid):
		return badRequest("", "%s", strings.TrimPrefix(err.Error(), "config: "))
	}
	return err
}

func fieldPath(fe *config.FieldError) string {
	if fe.Docs > 1 {
		return "documents[" + strconv.Itoa(fe.Doc) + "]" + prefixDot(fe.Path)
	}
	return fe.Path
}

func prefixDot(p string) string {
	if p == "" {
		return ""
	}
	return "." + p
}

// withRevision returns the object's encoding with metadata.resourceVersion
// set, as Kubernetes shows it; it is ignored when the object is applied.
func withRevision(e *config.Entry) []byte {
	const meta = `"metadata":{`
	i := bytes.Index(e.Encoded, []byte(meta))
	if i < 0 {
		return e.Encoded
	}
	i += len(meta)
	out := make([]byte, 0, len(e.Encoded)+40)
	out = append(out, e.Encoded[:i]...)
	out = append(out, `"resourceVersion":"`...)
	out = strconv.AppendInt(out, e.Revision, 10)
	out = append(out, `",`...)
	return append(out, e.Encoded[i:]...)
}

type applyResult struct {
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Action    string   `json:"action"`
	Revision  int64    `json:"revision"`
	Warnings  []string `json:"warnings,omitempty"`
}

type xdsResource struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

type applyAnswer struct {
	Revision  int64         `json:"revision"`
	DryRun    bool          `json:"dry_run,omitempty"`
	Results   []applyResult `json:"results"`
	Resources []xdsResource `json:"resources"`
	// Calls: with dry_run, the recorded calls the change would start
	// denying, per gateway (rbacdryrun.go); nil when it changes no
	// Gateway RBAC.
	Calls *callsDryRun `json:"calls,omitempty"`
	// Published: the control plane published the revision before the
	// answer (absent without a control plane, and for a dry run); false
	// with Warning saying so when it did not in time.
	Published *bool  `json:"published,omitempty"`
	Warning   string `json:"warning,omitempty"`
}

// telemetryListeners names the listeners a Telemetry may change: the
// proxies' (the mesh's Telemetry, in the root namespace without a
// selector) and those of the Gateways it may select (its namespace's, or
// every one from the root namespace; by their spec.selector).
func telemetryListeners(t *config.Table, o *config.Object) []string {
	var out []string
	sel := o.Telemetry.GetSelector().GetMatchLabels()
	root := o.Namespace == t.RootNamespace()
	if root && len(sel) == 0 {
		out = append(out, xds.ProxyName)
	}
	gws, _ := t.List(config.KindGateway, "")
	for _, e := range gws {
		gw := e.Object
		if gw.Namespace != o.Namespace && !root {
			continue
		}
		matches := true
		for k, v := range sel {
			matches = matches && gw.Gateway.Selector[k] == v
		}
		if !matches {
			continue
		}
		for _, srv := range gw.Gateway.Servers {
			out = append(out, ingress.ListenerName(srv.GetPort().GetNumber()))
		}
	}
	return out
}

// affectedResources names the xDS resources an apply changes: the route
// configuration (and listener) of every host a VirtualService names, the
// clusters and endpoints of every host and subset a DestinationRule names,
// the server listeners of the workloads a PeerAuthentication or
// AuthorizationPolicy selects, the listeners a Telemetry may change,
// before and after.
func affectedResources(t *config.Table, objs []*config.Object, results []config.Result) []xdsResource {
	seen := map[xdsResource]bool{}
	add := func(typ, name string) { seen[xdsResource{typ, name}] = true }
	for i, o := range objs {
		if results[i].Action == config.Unchanged {
			continue
		}
		versions := []*config.Object{o}
		if cur := t.Get(o.Key); cur != nil {
			versions = append(versions, cur.Object)
		}
		for _, v := range versions {
			// A security policy changes the inbound listeners of the
			// workloads it selects (those registered now).
			for _, a := range t.SelectedWorkloads(v) {
				add("Listener", xds.ServerListenerPrefix+a)
			}
			if v.Telemetry != nil {
				for _, l := range telemetryListeners(t, v) {
					add("Listener", l)
				}
			}
			for _, h := range config.Hosts(v) {
				if v.VirtualService != nil {
					add("RouteConfiguration", xds.RouteName(h))
					add("RouteConfiguration", xds.ProxyName)
					continue
				}
				add("Cluster", xds.ClusterName(h, "", 0))
				if v.ServiceEntry != nil {
					// A new service: its route too (a DNS entry's cluster
					// carries its endpoints, a STATIC one's EDS does).
					add("RouteConfiguration", xds.RouteName(h))
					add("RouteConfiguration", xds.ProxyName)
					if config.EntryStatic(v) {
						add("ClusterLoadAssignment", xds.ClusterName(h, "", 0))
					}
					continue
				}
				add("ClusterLoadAssignment", xds.ClusterName(h, "", 0))
				for _, s := range v.DestinationRule.Subsets {
					add("Cluster", xds.ClusterName(h, s.Name, 0))
					add("ClusterLoadAssignment", xds.ClusterName(h, s.Name, 0))
				}
			}
		}
	}
	out := make([]xdsResource, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b xdsResource) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

func (a *API) applyConfig(w http.ResponseWriter, r *http.Request, reg *backend) error {
	t, err := configTable(reg)
	if err != nil {
		return err
	}
	dry := false
	if s := r.URL.Query().Get("dry_run"); s != "" {
		if dry, err = strconv.ParseBool(s); err != nil {
			return badRequest("dry_run", "%q is not a boolean (true or false)", s)
		}
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	objs, err := config.Decode(body)
	if err != nil {
		return configError(err)
	}
	if len(objs) == 0 {
		return badRequest("", "no config object in the body: send VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication, AuthorizationPolicy, RequestAuthentication or Telemetry documents")
	}
	if err := requireConfigWrite(r, t, objs...); err != nil {
		return err
	}
	return a.writeConfig(w, r, reg, t, &config.ApplyWrite{Objects: objs, Table: t, DryRun: dry, Registered: registered(reg)})
}

func (a *API) writeConfig(w http.ResponseWriter, r *http.Request, reg *backend, t *config.Table, aw *config.ApplyWrite) error {
	var rev int64
	var err error
	if aw.DryRun {
		// Planned against the current state, nothing queued or written.
		rev, err = reg.DryRun(aw)
	} else {
		rev, err = reg.Submit(r.Context(), aw)
	}
	if err != nil {
		return configError(err)
	}
	ans := applyAnswer{Revision: rev, DryRun: aw.DryRun, Results: make([]applyResult, len(aw.Results)),
		Resources: affectedResources(t, aw.Objects, aw.Results)}
	if aw.DryRun {
		// Bad input was refused above (DryRun plans it): what is left is
		// what the gateways answer.
		if ans.Calls, err = dryRunCalls(r, reg, t, aw.Objects); err != nil {
			return err
		}
	}
	if !aw.DryRun {
		// Nothing changed: nothing to publish (and rev may be a revision of
		// a kind the control plane does not follow).
		changed := slices.ContainsFunc(aw.Results, func(res config.Result) bool { return res.Action != config.Unchanged })
		ans.Published, ans.Warning = a.waitPublished(r.Context(), rev, changed)
	}
	for i, res := range aw.Results {
		if res.Action != config.Unchanged && !aw.DryRun {
			res.Revision = rev
		}
		ans.Results[i] = applyResult{Kind: res.Key.Kind, Namespace: res.Key.Namespace, Name: res.Key.Name,
			Action: res.Action, Revision: res.Revision, Warnings: res.Warnings}
	}
	b, _ := json.Marshal(ans)
	writeBody(w, rev, append(b, '\n'))
	return nil
}

// registered reports whether reg's catalog has instances of a service (the
// warning of a config host that names none).
func registered(reg *backend) func(naming.ServiceKey) bool {
	ins := reg.inst.Instances()
	return func(k naming.ServiceKey) bool {
		svc := ins.Lookup(naming.ServiceKey{Namespace: k.Namespace, Name: k.Name})
		return svc != nil && svc.Len() > 0
	}
}

func (a *API) putConfig(w http.ResponseWriter, r *http.Request, reg *backend) error {
	t, err := configTable(reg)
	if err != nil {
		return err
	}
	k, err := configKeyOf(r)
	if err != nil {
		return err
	}
	ifRev, err := optRevision(r)
	if err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	objs, err := config.Decode(body)
	if err != nil {
		return configError(err)
	}
	if len(objs) != 1 {
		return badRequest("", "%d documents in the body, want exactly one", len(objs))
	}
	if objs[0].Key != k {
		return badRequest("metadata.name", "the body holds %s, the path names %s", objs[0].Key, k)
	}
	if err := requireConfigWrite(r, t, objs...); err != nil {
		return err
	}
	return a.writeConfig(w, r, reg, t, &config.ApplyWrite{Objects: objs, Table: t, IfRevision: ifRev, Registered: registered(reg)})
}

func (a *API) getConfig(w http.ResponseWriter, r *http.Request, reg *backend) error {
	t, err := configTable(reg)
	if err != nil {
		return err
	}
	k, err := configKeyOf(r)
	if err != nil {
		return err
	}
	if err := acl.Require(r, acl.Permission{Resource: acl.Config, Access: acl.Read, Namespace: k.Namespace}); err != nil {
		return err
	}
	e := t.Get(k)
	if e == nil {
		return &apiError{http.StatusNotFound, "not_found", k.String() + " not found", ""}
	}
	writeBody(w, e.Revision, append(withRevision(e), '\n'))
	return nil
}

func (a *API) deleteConfig(w http.ResponseWriter, r *http.Request, reg *backend) error {
	t, err := configTable(reg)
	if err != nil {
		return err
	}
	k, err := configKeyOf(r)
	if err != nil {
		return err
	}
	if err := requireConfigWrite(r, t, &config.Object{Key: k}); err != nil {
		return err
	}
	ifRev, err := optRevision(r)
	if err != nil {
		return err
	}
	rev, err := reg.Submit(r.Context(), &config.DeleteWrite{Key: k, IfRevision: ifRev})
	if err != nil {
		return configError(err)
	}
	published, warning := a.waitPublished(r.Context(), rev, true)
	writeJSON(w, rev, func(b []byte) []byte {
		b = append(b, `{"revision":`...)
		b = strconv.AppendInt(b, rev, 10)
		if published != nil {
			b = append(b, `,"published":`...)
			b = strconv.AppendBool(b, *published)
		}
		if warning != "" {
			b = append(b, `,"warning":`...)
			b = jsonstring.Append(b, warning)
		}
		return append(b, '}')
	})
	return nil
}

// listConfig lists objects, optionally of one kind and namespace, and
// blocks like an instance query with index and wait.
func (a *API) listConfig(w http.ResponseWriter, r *http.Request, reg *backend) error {
	t, err := configTable(reg)
	if err != nil {
		return err
	}
	v := r.URL.Query()
	kind := ""
	if s := v.Get("kind"); s != "" {
		if kind, err = configKind(s); err != nil {
			return err
		}
	}
	ns := v.Get("namespace")
	if ns != "" {
		if err := checkName("namespace", ns); err != nil {
			return err
		}
	}
	readable, err := readableFilter(r, acl.Config, ns)
	if err != nil {
		return err
	}
	if s := v.Get("index"); s != "" {
		index, err := strconv.ParseInt(s, 10, 64)
		if err != nil || index < 0 {
			return badRequest("index", "%q is not a revision (a non-negative integer)", s)
		}
		wait := defaultWait
		if s := v.Get("wait"); s != "" {
			if wait, err = time.ParseDuration(s); err != nil || wait < 0 || wait > maxWait {
				return badRequest("wait", "%q is not a duration between 0s and %v", s, maxWait)
			}
		}
		if t.Revision() <= index {
			if n := a.waiting.Add(1); n > a.opts.MaxWaiting {
				a.waiting.Add(-1)
				return &apiError{http.StatusTooManyRequests, "resource_exhausted", "too many blocking queries are waiting; retry later", ""}
			}
			ctx, cancel := context.WithTimeout(r.Context(), wait)
			release := context.AfterFunc(a.stopping, cancel)
			t.Wait(ctx, index)
			release()
			cancel()
			a.waiting.Add(-1)
			// The token may have been revoked while the query waited.
			if _, err := readableFilter(r, acl.Config, ns); err != nil {
				return err
			}
		}
	}
	entries, rev := t.List(kind, ns)
	if readable != nil {
		entries = slices.DeleteFunc(slices.Clone(entries), func(e *config.Entry) bool { return !readable.Allows(e.Object.Key.Namespace) })
	}
	writeJSON(w, rev, func(b []byte) []byte {
		b = append(b, `{"revision":`...)
		b = strconv.AppendInt(b, rev, 10)
		b = append(b, `,"items":[`...)
		for i, e := range entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, withRevision(e)...)
		}
		return append(b, "]}"...)
	})
	return nil
}

// requireConfigWrite checks that the caller may write config in the
// namespace of each object and in the namespace of every service it
// configures, as written and as stored now: a VirtualService in one
// namespace can route another namespace's host ("orders.prod").
func requireConfigWrite(r *http.Request, t *config.Table, objs ...*config.Object) error {
	var seen []string
	need := func(ns string) error {
		if slices.Contains(seen, ns) {
			return nil
		}
		seen = append(seen, ns)
		return acl.Require(r, acl.Permission{Resource: acl.Config, Access: acl.Write, Namespace: ns})
	}
	for _, o := range objs {
		if err := need(o.Key.Namespace); err != nil {
			return err
		}
		versions := []*config.Object{o}
		if cur := t.Get(o.Key); cur != nil {
			versions = append(versions, cur.Object)
		}
		for _, v := range versions {
			if v.VirtualService == nil && v.DestinationRule == nil && v.Gateway == nil && v.ServiceEntry == nil {
				continue // a key only (a delete)
			}
			for _, h := range config.Hosts(v) {
				if err := need(h.Namespace); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
