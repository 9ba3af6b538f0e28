package httpapi

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/placement"
)

// The placement scheduler (docs/api.md, "Placement"): nodes
// and placements as Kubernetes objects, decided by internal/placement and
// written through the registry like every record kind.

func (a *API) placementRoutes() {
	a.handle("PUT", "/v1/nodes/{name}", a.putNode)
	a.handle("POST", "/v1/nodes", a.applyNodes)
	a.handle("GET", "/v1/nodes", a.listNodes)
	a.handle("GET", "/v1/nodes/{name}", a.getNode)
	a.handle("DELETE", "/v1/nodes/{name}", a.deleteNode)
	a.handle("POST", "/v1/placements", a.place)
	a.handle("GET", "/v1/placements", a.listPlacements)
	a.handle("GET", "/v1/placements/{namespace}/{name}", a.getPlacement)
	a.handle("DELETE", "/v1/placements/{namespace}/{name}", a.deletePlacement)
}

// schedulerFor checks that the caller holds perm, then returns the
// registry's scheduler: the start of every placement handler.
func schedulerFor(r *http.Request, reg *backend, perm acl.Permission) (*placement.Scheduler, error) {
	if err := acl.Require(r, perm); err != nil {
		return nil, err
	}
	return schedulerOf(reg)
}

func schedulerOf(reg *backend) (*placement.Scheduler, error) {
	s := placement.Of(reg.Catalog())
	if s == nil {
		return nil, &apiError{http.StatusNotFound, "not_found", "the placement scheduler is not enabled on this server", ""}
	}
	return s, nil
}

// isYAML reports whether the body is YAML: Content-Type application/yaml
// (or its x- and text/ spellings). Anything else is read as JSON.
func isYAML(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return false
	}
	switch mt {
	case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml":
		return true
	}
	return false
}

// placementError maps the scheduler's errors to API errors.
func placementError(err error) error {
	var fe *placement.FieldError
	msg := strings.TrimPrefix(err.Error(), "placement: ")
	switch {
	case errors.As(err, &fe):
		return badRequest(fe.Path, "%s", msg)
	case errors.Is(err, placement.ErrNotFound):
		return &apiError{http.StatusNotFound, "not_found", msg, ""}
	case errors.Is(err, placement.ErrConflict):
		return &apiError{http.StatusConflict, "conflict", msg, ""}
	case errors.Is(err, placement.ErrInvalid):
		return badRequest("", "%s", msg)
	}
	return err
}

// isList reports whether a body that decoded is a List (its paths start
// with items[i]). Called on error paths only: it parses the body again.
func isList(body []byte, yamlBody bool) bool {
	var tm struct {
		Kind string `json:"kind"`
	}
	if yamlBody {
		_ = yaml.Unmarshal(body, &tm)
	} else {
		_ = json.Unmarshal(body, &tm)
	}
	return tm.Kind == "List"
}

// pageLimit reads ?limit= (default and bounds as every listing).
func pageLimit(r *http.Request) (int, error) {
	limit := defaultLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return 0, badRequest("limit", "%q is not an integer in 1..%d", s, maxLimit)
		}
		limit = n
	}
	return limit, nil
}

func selectorParam(r *http.Request) (label.Selector, error) {
	s := r.URL.Query().Get("selector")
	if s == "" {
		return nil, nil
	}
	sel, err := label.Parse(s)
	if err != nil {
		return nil, badRequest("selector", "%s", strings.TrimPrefix(err.Error(), "label: "))
	}
	return sel, nil
}

func pageToken(r *http.Request) (string, error) {
	s := r.URL.Query().Get("page_token")
	if s == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return "", badRequest("page_token", "malformed page token; pass next_page_token from the previous answer unchanged")
	}
	return string(b), nil
}

// nodeJSON is a node as the API answers it: the Kubernetes Node fields
// Sextant keeps, with metadata.resourceVersion its revision. Applying it
// back is accepted (resourceVersion is ignored).
type nodeJSON struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string            `json:"name"`
		Labels          map[string]string `json:"labels,omitempty"`
		ResourceVersion string            `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		Taints        []corev1.Taint `json:"taints,omitempty"`
		Unschedulable bool           `json:"unschedulable,omitempty"`
	} `json:"spec"`
	Status struct {
		Allocatable corev1.ResourceList `json:"allocatable"`
	} `json:"status"`
}

type nodeItemJSON struct {
	Node       nodeJSON            `json:"node"`
	Requested  corev1.ResourceList `json:"requested"`
	Placements int                 `json:"placements"`
}

func nodeItem(info placement.NodeInfo) nodeItemJSON {
	k := info.Node.Kubernetes()
	var it nodeItemJSON
	it.Node.APIVersion, it.Node.Kind = "v1", "Node"
	it.Node.Metadata.Name, it.Node.Metadata.Labels = k.Name, k.Labels
	it.Node.Metadata.ResourceVersion = strconv.FormatInt(info.Node.Revision, 10)
	it.Node.Spec.Taints, it.Node.Spec.Unschedulable = k.Spec.Taints, k.Spec.Unschedulable
	it.Node.Status.Allocatable = k.Status.Allocatable
	it.Requested = info.Requested.ResourceList()
	it.Placements = info.Placements
	return it
}

type placementJSON struct {
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	Node      string              `json:"node"`
	Labels    map[string]string   `json:"labels"`
	Requests  corev1.ResourceList `json:"requests"`
	Revision  int64               `json:"revision"`
}

func placementItem(p *placement.Placement) placementJSON {
	return placementJSON{Namespace: p.Namespace, Name: p.Name, Node: p.Node, Labels: p.Labels.Map(),
		Requests: p.Requests.ResourceList(), Revision: p.Revision}
}

type keyJSON struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// writeAnswer sends v as the JSON body with the revision header.
func writeAnswer(w http.ResponseWriter, rev int64, v any) {
	b, _ := json.Marshal(v)
	writeBody(w, rev, append(b, '\n'))
}

func (a *API) putNode(w http.ResponseWriter, r *http.Request, reg *backend) error {
	s, err := schedulerFor(r, reg, acl.Permission{Resource: acl.Placements, Access: acl.Write})
	if err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	n, err := placement.DecodeNode(body, isYAML(r))
	if err != nil {
		return placementError(err)
	}
	if name := r.PathValue("name"); n.Name != name {
		return badRequest("metadata.name", "the body names node %q, the path %q", n.Name, name)
	}
	rev, err := reg.Submit(r.Context(), &placement.NodesWrite{Scheduler: s, Nodes: []*placement.Node{n}})
	if err != nil {
		return placementError(err)
	}
	writeAnswer(w, rev, struct {
		Revision int64 `json:"revision"`
	}{rev})
	return nil
}

func (a *API) applyNodes(w http.ResponseWriter, r *http.Request, reg *backend) error {
	s, err := schedulerFor(r, reg, acl.Permission{Resource: acl.Placements, Access: acl.Write})
	if err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	yamlBody := isYAML(r)
	nodes, err := placement.DecodeNodes(body, yamlBody)
	if err != nil {
		return placementError(err)
	}
	if len(nodes) == 0 {
		return badRequest("items", "the List has no items")
	}
	wr := &placement.NodesWrite{Scheduler: s, Nodes: nodes}
	rev, err := reg.Submit(r.Context(), wr)
	if err != nil {
		return placementError(err)
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	writeAnswer(w, rev, struct {
		Revision int64    `json:"revision"`
		Names    []string `json:"names"`
		Changed  []string `json:"changed"`
		Created  []string `json:"created"`
	}{rev, names, append([]string{}, wr.Changed...), append([]string{}, wr.Created...)})
	return nil
}

func (a *API) getNode(w http.ResponseWriter, r *http.Request, reg *backend) error {
	s, err := schedulerFor(r, reg, acl.Permission{Resource: acl.Placements, Access: acl.Read})
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	info, rev, ok := s.Node(name)
	if !ok {
		return &apiError{http.StatusNotFound, "not_found", "node " + strconv.Quote(name) + " not found", "name"}
	}
	writeAnswer(w, rev, nodeItem(info))
	return nil
}

func (a *API) listNodes(w http.ResponseWriter, r *http.Request, reg *backend) error {
	s, err := schedulerFor(r, reg, acl.Permission{Resource: acl.Placements, Access: acl.Read})
	if err != nil {
		return err
	}
	sel, err := selectorParam(r)
	if err != nil {
		return err
	}
	limit, err := pageLimit(r)
	if err != nil {
		return err
	}
	after, err := pageToken(r)
	if err != nil {
		return err
	}
	items, rev, more := s.Nodes(sel, after, limit)
	next := ""
	if more {
		next = base64.RawURLEncoding.EncodeToString([]byte(items[len(items)-1].Node.Name))
	}
	writePage(w, rev, items, nodeItem, next)
	return nil
}

func (a *API) deleteNode(w http.ResponseWriter, r *http.Request, reg *backend) error {
	s, err := schedulerFor(r, reg, acl.Permission{Resource: acl.Placements, Access: acl.Write})
	if err != nil {
		return err
	}
	wr := &placement.DeleteNodeWrite{Scheduler: s, Name: r.PathValue("name")}
	rev, err := reg.SubmitChecked(r.Context(), wr)
	if err != nil {
		return placementError(err)
	}
	released := make([]keyJSON, len(wr.Released))
	for i, k := range wr.Released {
		released[i] = keyJSON{k.Namespace, k.Name}
	}
	writeAnswer(w, rev, struct {
		Revision int64     `json:"revision"`
		Released []keyJSON `json:"released"`
	}{rev, released})
	return nil
}

type resultJSON struct {
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	Node          string `json:"node,omitempty"`
	Unschedulable string `json:"unschedulable,omitempty"`
}

func (a *API) place(w http.ResponseWriter, r *http.Request, reg *backend) error {
	s, err := schedulerOf(reg)
	if err != nil {
		return err
	}
	dry := false
	if v := r.URL.Query().Get("dry_run"); v != "" {
		if dry, err = strconv.ParseBool(v); err != nil {
			return badRequest("dry_run", "%q is not a boolean (true or false)", v)
		}
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	yamlBody := isYAML(r)
	ws, err := placement.DecodePods(body, yamlBody)
	if err != nil {
		return placementError(err)
	}
	if len(ws) == 0 {
		return badRequest("items", "the List has no items")
	}
	for _, wl := range ws {
		if err := acl.Require(r, acl.Permission{Resource: acl.Placements, Access: acl.Write, Namespace: wl.Namespace}); err != nil {
			return err
		}
	}
	pw := &placement.PlaceWrite{Scheduler: s, Workloads: ws}
	var rev int64
	if dry {
		rev, err = reg.DryRun(pw)
	} else {
		rev, err = reg.SubmitChecked(r.Context(), pw)
	}
	if err != nil {
		var pe *placement.PlacedError
		if errors.As(err, &pe) {
			field := "metadata.name"
			if isList(body, yamlBody) {
				field = "items[" + strconv.Itoa(pe.Index) + "].metadata.name"
			}
			return &apiError{http.StatusConflict, "conflict", strings.TrimPrefix(err.Error(), "placement: "), field}
		}
		return placementError(err)
	}
	results := make([]resultJSON, len(pw.Results))
	for i, res := range pw.Results {
		results[i] = resultJSON{res.Namespace, res.Name, res.Node, res.Unschedulable}
	}
	writeAnswer(w, rev, struct {
		Revision int64        `json:"revision"`
		DryRun   bool         `json:"dry_run,omitempty"`
		Results  []resultJSON `json:"results"`
	}{rev, dry, results})
	return nil
}

func (a *API) listPlacements(w http.ResponseWriter, r *http.Request, reg *backend) error {
	s, err := schedulerOf(reg)
	if err != nil {
		return err
	}
	v := r.URL.Query()
	q := placement.PlacementQuery{Namespace: v.Get("namespace"), Node: v.Get("node")}
	readable := acl.Readable(r.Context(), acl.Placements)
	if q.Namespace != "" {
		if err := acl.Require(r, acl.Permission{Resource: acl.Placements, Access: acl.Read, Namespace: q.Namespace}); err != nil {
			return err
		}
	} else if !readable.Any() {
		if err := acl.Require(r, acl.Permission{Resource: acl.Placements, Access: acl.Read, Namespace: "*"}); err != nil {
			return err
		}
	}
	if q.Selector, err = selectorParam(r); err != nil {
		return err
	}
	if q.Limit, err = pageLimit(r); err != nil {
		return err
	}
	after, err := pageToken(r)
	if err != nil {
		return err
	}
	if after != "" {
		ns, name, ok := strings.Cut(after, "\x00")
		if !ok {
			return badRequest("page_token", "malformed page token; pass next_page_token from the previous answer unchanged")
		}
		q.After = placement.Key{Namespace: ns, Name: name}
	}
	items, rev, more := s.Placements(q)
	if q.Namespace == "" && !readable.All() {
		// Only the namespaces the caller may read; the page token still
		// follows the unfiltered order.
		kept := items[:0:0]
		for _, p := range items {
			if readable.Allows(p.Namespace) {
				kept = append(kept, p)
			}
		}
		if more && len(items) > 0 {
			last := items[len(items)-1]
			items = kept
			next := base64.RawURLEncoding.EncodeToString([]byte(last.Namespace + "\x00" + last.Name))
			return a.writePlacements(w, rev, items, next)
		}
		items = kept
	}
	next := ""
	if more {
		last := items[len(items)-1]
		next = base64.RawURLEncoding.EncodeToString([]byte(last.Namespace + "\x00" + last.Name))
	}
	return a.writePlacements(w, rev, items, next)
}

func (a *API) writePlacements(w http.ResponseWriter, rev int64, items []*placement.Placement, next string) error {
	writePage(w, rev, items, placementItem, next)
	return nil
}

// writePage streams one page of a list: {"revision","items","next_page_token"},
// each item as view(item) encodes.
func writePage[T, V any](w http.ResponseWriter, rev int64, items []T, view func(T) V, next string) {
	streamJSON(w, rev, func(bw *bufio.Writer) {
		bw.WriteString(`{"revision":`)
		bw.WriteString(strconv.FormatInt(rev, 10))
		bw.WriteString(`,"items":[`)
		for i, it := range items {
			if i > 0 {
				bw.WriteByte(',')
			}
			b, _ := json.Marshal(view(it))
			bw.Write(b)
		}
		bw.WriteString(`],"next_page_token":`)
		bw.WriteString(strconv.Quote(next))
		bw.WriteByte('}')
	})
}

func (a *API) getPlacement(w http.ResponseWriter, r *http.Request, reg *backend) error {
	s, err := schedulerFor(r, reg, acl.Permission{Resource: acl.Placements, Access: acl.Read, Namespace: r.PathValue("namespace")})
	if err != nil {
		return err
	}
	k := placement.Key{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	p, rev, ok := s.Placement(k)
	if !ok {
		return &apiError{http.StatusNotFound, "not_found", "placement " + k.String() + " not found", "name"}
	}
	writeAnswer(w, rev, placementItem(p))
	return nil
}

func (a *API) deletePlacement(w http.ResponseWriter, r *http.Request, reg *backend) error {
	s, err := schedulerFor(r, reg, acl.Permission{Resource: acl.Placements, Access: acl.Write, Namespace: r.PathValue("namespace")})
	if err != nil {
		return err
	}
	wr := &placement.DeletePlacementWrite{Scheduler: s, Key: placement.Key{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}}
	rev, err := reg.Submit(r.Context(), wr)
	if err != nil {
		return placementError(err)
	}
	writeAnswer(w, rev, struct {
		Revision int64  `json:"revision"`
		Node     string `json:"node"`
	}{rev, wr.Node})
	return nil
}
