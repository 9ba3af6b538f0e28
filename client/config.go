package client

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"time"
)

// ConfigResult is what an apply did (or would do) to one config object.
type ConfigResult struct {
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Action    string   `json:"action"` // created, configured, unchanged
	Revision  int64    `json:"revision"`
	Warnings  []string `json:"warnings,omitempty"`
}

// XDSResource names an xDS resource an apply changes.
type XDSResource struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// ApplyResult is the answer of ApplyConfig.
type ApplyResult struct {
	Revision  int64          `json:"revision"`
	DryRun    bool           `json:"dry_run,omitempty"`
	Results   []ConfigResult `json:"results"`
	Resources []XDSResource  `json:"resources"`
	// Calls: with dryRun, for an apply of AuthorizationPolicies or
	// Gateways, the calls each registered gateway recorded in the last
	// hour that the change would start denying; nil otherwise.
	Calls *CallsDryRun `json:"calls,omitempty"`
	// Published: the server's control plane published the revision to its
	// xDS cache before answering, so that a subscriber connecting now gets
	// this config or newer; false (with Warning) when it did not in time;
	// nil without a control plane or for a dry run.
	Published *bool  `json:"published,omitempty"`
	Warning   string `json:"warning,omitempty"`
}

// CallsDryRun is the server's ask of every registered gateway.
type CallsDryRun struct {
	Note     string          `json:"note"`
	Ports    []uint32        `json:"ports"`               // the Gateway listener ports evaluated
	NotAsked string          `json:"not_asked,omitempty"` // why no gateway was asked
	Gateways []GatewayDryRun `json:"gateways"`
}

// GatewayDryRun is one gateway's answer, or why it could not be asked.
type GatewayDryRun struct {
	ID      string        `json:"id"`
	Service string        `json:"service"`
	Admin   string        `json:"admin"`
	Error   string        `json:"error,omitempty"`
	Result  *DryRunResult `json:"result,omitempty"`
}

// DryRunResult is a gateway's POST /v1/rbac:dry-run answer.
type DryRunResult struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Scanned calls were read; Evaluated of them came in on a port with
	// candidate filters (OtherPorts did not).
	Scanned      int `json:"scanned"`
	Evaluated    int `json:"evaluated"`
	OtherPorts   int `json:"other_ports"`
	Unchanged    int `json:"unchanged"`
	NewlyDenied  int `json:"newly_denied"`
	NewlyAllowed int `json:"newly_allowed"`
	// Undetermined calls read something the record does not keep, counted
	// by that attribute.
	Undetermined   int            `json:"undetermined"`
	UndeterminedBy map[string]int `json:"undetermined_by"`
	// Denied groups the newly denied calls, most first.
	Denied          []DryRunGroup `json:"denied"`
	GroupsTruncated bool          `json:"groups_truncated,omitempty"`
	Samples         []DryRunCall  `json:"samples"`
	// Truncated: the scan stopped at max_calls or the timeout
	// (TruncatedBy); the counts cover the calls read.
	Truncated   bool   `json:"truncated"`
	TruncatedBy string `json:"truncated_by,omitempty"`
	// Errors are services whose calls could not be read (not counted).
	Errors []string `json:"errors,omitempty"`
	Note   string   `json:"note"`
}

// DryRunGroup counts newly denied calls alike.
type DryRunGroup struct {
	Port      int    `json:"port"`
	Service   string `json:"service"`
	Route     string `json:"route"`
	Principal string `json:"principal"`
	Method    string `json:"method"`
	Path      string `json:"path"`
	Policy    string `json:"policy"`
	Count     int    `json:"count"`
}

// DryRunCall is one newly denied call.
type DryRunCall struct {
	Start     time.Time `json:"start"`
	Port      int       `json:"port"`
	Service   string    `json:"service"`
	Route     string    `json:"route"`
	Principal string    `json:"principal"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Host      string    `json:"host"`
	PeerIP    string    `json:"peer_ip,omitempty"`
	Policy    string    `json:"policy"`
}

// ApplyConfig creates or replaces routing config: docs holds one or more
// VirtualService and DestinationRule documents, YAML or JSON. The apply is
// atomic and idempotent. With dryRun nothing is written and the answer says
// what would change.
func (c *Client) ApplyConfig(ctx context.Context, docs []byte, dryRun bool) (ApplyResult, error) {
	var res ApplyResult
	path := "/v1/config:apply"
	if dryRun {
		path += "?dry_run=true"
	}
	err := c.do(ctx, "POST", path, docs, &res)
	return res, err
}

// ConfigList is the answer of ListConfig: each object as the server holds
// it (Kubernetes shape, with metadata.resourceVersion).
type ConfigList struct {
	Revision int64             `json:"revision"`
	Items    []json.RawMessage `json:"items"`
}

// ListConfig lists config objects, of one kind and namespace if given
// (empty: all).
func (c *Client) ListConfig(ctx context.Context, kind, namespace string) (ConfigList, error) {
	var sb strings.Builder
	q := queryString{b: &sb}
	q.add("kind", kind)
	q.add("namespace", namespace)
	var res ConfigList
	err := c.do(ctx, "GET", "/v1/config"+sb.String(), nil, &res)
	return res, err
}

func configPath(kind, namespace, name string) string {
	return "/v1/config/" + url.PathEscape(kind) + "/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
}

// GetConfig returns one config object (Kubernetes shape, JSON).
func (c *Client) GetConfig(ctx context.Context, kind, namespace, name string) (json.RawMessage, error) {
	var res json.RawMessage
	err := c.do(ctx, "GET", configPath(kind, namespace, name), nil, &res)
	return res, err
}

// DeleteConfig deletes one config object and returns the revision.
func (c *Client) DeleteConfig(ctx context.Context, kind, namespace, name string) (int64, error) {
	res, err := c.DeleteConfigPublished(ctx, kind, namespace, name)
	return res.Revision, err
}

// DeleteResult is the answer of DeleteConfigPublished.
type DeleteResult struct {
	Revision int64 `json:"revision"`
	// Published and Warning as in ApplyResult: the server answered once its
	// control plane had published the delete (false, with Warning, when it
	// did not in time; nil without a control plane).
	Published *bool  `json:"published,omitempty"`
	Warning   string `json:"warning,omitempty"`
}

// DeleteConfigPublished deletes a config object as DeleteConfig does and
// also says whether the control plane published the delete.
func (c *Client) DeleteConfigPublished(ctx context.Context, kind, namespace, name string) (DeleteResult, error) {
	var res DeleteResult
	err := c.do(ctx, "DELETE", configPath(kind, namespace, name), nil, &res)
	return res, err
}

// Do sends one request to the server's API (path with its query) with body
// (nil: none) and decodes a 2xx JSON answer into out (nil: discard); any
// other answer is an *Error. For endpoints this client has no method for.
func (c *Client) Do(ctx context.Context, method, pathAndQuery string, body []byte, out any) error {
	return c.do(ctx, method, pathAndQuery, body, out)
}
