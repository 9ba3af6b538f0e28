package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// The placement scheduler's API (docs/api.md, "Placement"): nodes and
// workloads are Kubernetes objects. The types here are the fields the
// server keeps and answers, so that this package needs no Kubernetes
// dependency; a document holding any Kubernetes Node or Pod (JSON or YAML)
// can be sent as it is with ApplyNodes and Place.

// ObjectMeta is the part of Kubernetes' metadata the scheduler keeps.
type ObjectMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// ResourceVersion is the revision of the object's last change, as the
	// server answers it; ignored when sent.
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// Taint is a Kubernetes node taint; Effect is NoSchedule, PreferNoSchedule
// or NoExecute.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Node is a Kubernetes Node as the scheduler keeps it. Allocatable holds
// Kubernetes quantities by resource name ("cpu": "4", "memory": "32Gi",
// "pods": "110", "example.com/gpu": "2").
type Node struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       struct {
		Taints        []Taint `json:"taints,omitempty"`
		Unschedulable bool    `json:"unschedulable,omitempty"`
	} `json:"spec"`
	Status struct {
		Allocatable map[string]string `json:"allocatable"`
	} `json:"status"`
}

// NodeItem is a node with what is reserved on it: Requested by resource,
// and the number of placements.
type NodeItem struct {
	Node       Node              `json:"node"`
	Requested  map[string]string `json:"requested"`
	Placements int               `json:"placements"`
}

// NodeList is one page of ListNodes.
type NodeList struct {
	Revision      int64      `json:"revision"`
	Items         []NodeItem `json:"items"`
	NextPageToken string     `json:"next_page_token"`
}

// NodeListOptions select nodes; empty fields do not filter.
type NodeListOptions struct {
	Selector  string // label selector over node labels, e.g. "zone in (a,b)"
	Limit     int    // nodes per page (server default 1000, at most 10000)
	PageToken string // NextPageToken of the previous page
}

// NodesResult is the answer of ApplyNodes: every node named, those the
// write changed (the others were stored as given already), and of those
// the ones it created (not stored before).
type NodesResult struct {
	Revision int64    `json:"revision"`
	Names    []string `json:"names"`
	Changed  []string `json:"changed"`
	Created  []string `json:"created"`
}

// PlacementKey names a workload.
type PlacementKey struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (k PlacementKey) String() string { return k.Namespace + "/" + k.Name }

// DeleteNodeResult is the answer of DeleteNode: the placements it released.
type DeleteNodeResult struct {
	Revision int64          `json:"revision"`
	Released []PlacementKey `json:"released"`
}

// Placed is the outcome for one workload: its node, or why none fits
// (kube-scheduler's message, e.g. "0/3 nodes are available: 3 Insufficient
// cpu.").
type Placed struct {
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	Node          string `json:"node,omitempty"`
	Unschedulable string `json:"unschedulable,omitempty"`
}

// PlaceResult is the answer of Place, one result per workload in order.
type PlaceResult struct {
	Revision int64    `json:"revision"`
	DryRun   bool     `json:"dry_run,omitempty"`
	Results  []Placed `json:"results"`
}

// Placement is a workload bound to a node, with its labels and the
// resources reserved (Kubernetes quantities by resource name).
type Placement struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Node      string            `json:"node"`
	Labels    map[string]string `json:"labels"`
	Requests  map[string]string `json:"requests"`
	Revision  int64             `json:"revision"`
}

// PlacementList is one page of ListPlacements.
type PlacementList struct {
	Revision      int64       `json:"revision"`
	Items         []Placement `json:"items"`
	NextPageToken string      `json:"next_page_token"`
}

// PlacementListOptions select placements; empty fields do not filter.
type PlacementListOptions struct {
	Namespace string
	Node      string
	Selector  string // label selector over the workloads' labels
	Limit     int
	PageToken string
}

// asJSON returns doc as JSON: YAML is converted, JSON passes as it is.
func asJSON(doc []byte) ([]byte, error) {
	t := bytes.TrimSpace(doc)
	if len(t) > 0 && t[0] == '{' {
		return doc, nil
	}
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("client: the document is neither JSON nor YAML: %w", err)
	}
	return j, nil
}

func nodePath(name string) string { return "/v1/nodes/" + url.PathEscape(name) }

// PutNode creates or replaces one node (the APIVersion and Kind are filled
// in if empty) and returns the revision; a node stored as given already
// keeps its revision.
func (c *Client) PutNode(ctx context.Context, n Node) (int64, error) {
	if n.APIVersion == "" {
		n.APIVersion = "v1"
	}
	if n.Kind == "" {
		n.Kind = "Node"
	}
	body, err := json.Marshal(n)
	if err != nil {
		return 0, fmt.Errorf("client: put node: %w", err)
	}
	var res struct {
		Revision int64 `json:"revision"`
	}
	err = c.do(ctx, "PUT", nodePath(n.Metadata.Name), body, &res)
	return res.Revision, err
}

// ApplyNodes creates or replaces the nodes of doc, a Kubernetes Node or a
// List of Nodes in JSON or YAML, atomically: if one is invalid nothing is
// written and the *Error's Field names it (items[3].status.allocatable.cpu).
func (c *Client) ApplyNodes(ctx context.Context, doc []byte) (NodesResult, error) {
	body, err := asJSON(doc)
	if err != nil {
		return NodesResult{}, err
	}
	var res NodesResult
	err = c.do(ctx, "POST", "/v1/nodes", body, &res)
	return res, err
}

// GetNode returns one node with what is reserved on it.
func (c *Client) GetNode(ctx context.Context, name string) (NodeItem, error) {
	var res NodeItem
	err := c.do(ctx, "GET", nodePath(name), nil, &res)
	return res, err
}

// ListNodes returns one page of nodes in name order.
func (c *Client) ListNodes(ctx context.Context, opts NodeListOptions) (NodeList, error) {
	var sb strings.Builder
	sb.WriteString("/v1/nodes")
	q := queryString{b: &sb}
	q.add("selector", opts.Selector)
	if opts.Limit > 0 {
		q.add("limit", strconv.Itoa(opts.Limit))
	}
	q.add("page_token", opts.PageToken)
	var res NodeList
	err := c.do(ctx, "GET", sb.String(), nil, &res)
	return res, err
}

// DeleteNode deletes a node and releases its placements.
func (c *Client) DeleteNode(ctx context.Context, name string) (DeleteNodeResult, error) {
	var res DeleteNodeResult
	err := c.do(ctx, "DELETE", nodePath(name), nil, &res)
	return res, err
}

// Place places the workloads of doc, a Kubernetes Pod or a List of Pods in
// JSON or YAML, in order, each seeing the ones before it. A workload that
// fits nowhere is answered with the reasons, not an error; one already
// placed is a 409 *Error naming it, and then nothing is placed. With
// dryRun nothing is reserved: the answer says where each would go.
func (c *Client) Place(ctx context.Context, doc []byte, dryRun bool) (PlaceResult, error) {
	body, err := asJSON(doc)
	if err != nil {
		return PlaceResult{}, err
	}
	path := "/v1/placements"
	if dryRun {
		path += "?dry_run=true"
	}
	var res PlaceResult
	err = c.do(ctx, "POST", path, body, &res)
	return res, err
}

func placementPath(namespace, name string) string {
	return "/v1/placements/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
}

// GetPlacement returns one placement.
func (c *Client) GetPlacement(ctx context.Context, namespace, name string) (Placement, error) {
	var res Placement
	err := c.do(ctx, "GET", placementPath(namespace, name), nil, &res)
	return res, err
}

// ListPlacements returns one page of placements in namespace/name order.
func (c *Client) ListPlacements(ctx context.Context, opts PlacementListOptions) (PlacementList, error) {
	var sb strings.Builder
	sb.WriteString("/v1/placements")
	q := queryString{b: &sb}
	q.add("namespace", opts.Namespace)
	q.add("node", opts.Node)
	q.add("selector", opts.Selector)
	if opts.Limit > 0 {
		q.add("limit", strconv.Itoa(opts.Limit))
	}
	q.add("page_token", opts.PageToken)
	var res PlacementList
	err := c.do(ctx, "GET", sb.String(), nil, &res)
	return res, err
}

// DeletePlacement frees a placement's resources and returns the revision;
// a workload that is not placed is a 404 *Error.
func (c *Client) DeletePlacement(ctx context.Context, namespace, name string) (int64, error) {
	var res struct {
		Revision int64 `json:"revision"`
	}
	err := c.do(ctx, "DELETE", placementPath(namespace, name), nil, &res)
	return res.Revision, err
}
