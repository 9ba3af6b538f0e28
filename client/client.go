// Package client is the Go SDK of Sextant, over the HTTP API of
// docs/api.md (v1):
//
//   - the API's calls: register, deregister, heartbeat, read, query, list,
//     the change feed, and watching a service with blocking queries;
//   - Keepalive: an instance kept registered (batched heartbeats shared by
//     all registrations of a Client, re-registered when the server loses
//     it, deregistered on Close);
//   - View: a watched, always current copy of services in the process, with
//     the subset load balancer and a balancer policy per service, and Pick /
//     Prepare to choose an instance per call and learn from its outcome;
//   - RoundTripper: net/http over service names, with retries on another
//     instance and optional call records (CallLog);
//   - client/grpcresolver: the same for grpc-go.
//
// A Client is safe for concurrent use by many goroutines and keeps its
// connections alive; create one per server and share it. Every method that
// talks to the server takes a context that bounds the whole call. Every
// goroutine the package starts has an owner that stops it (Registration.Close,
// View.Close); see docs/sdk.md.
//
// The package owns no registry state: what it holds is a copy of what the
// server answered. It uses the engines internal/subset, internal/balancer,
// internal/label and internal/callstore, and no other part of the server.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Client talks to one Sextant server. The zero value is not usable; call New.
type Client struct {
	base      string // scheme://host[:port][/prefix], no trailing slash
	http      *http.Client
	userAgent string
	auth      string      // "Bearer <token>", or ""
	tls       *tls.Config // for the default transport
	caFile    string      // read by New into tls

	hbOnce sync.Once
	hb     *heartbeater // built on the first Keepalive
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the tuned default http.Client (for TLS, proxies or
// tests). The client must not set a Timeout shorter than the longest blocking
// query you make; contexts bound calls instead.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// WithUserAgent sets the User-Agent header sent with every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// DefaultUserAgent is sent unless WithUserAgent says otherwise.
const DefaultUserAgent = "sextant-client/1"

// New returns a client for the server at baseURL, e.g.
// "http://127.0.0.1:7400". A URL without a scheme gets "http://".
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		return nil, fmt.Errorf("client: empty server URL")
	}
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: server URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("client: server URL %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q has no host", baseURL)
	}
	c := &Client{
		base:      strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"),
		userAgent: DefaultUserAgent,
	}
	for _, o := range opts {
		o(c)
	}
	if c.caFile != "" {
		cfg, err := caConfig(c.tls, c.caFile)
		if err != nil {
			return nil, err
		}
		c.tls = cfg
	}
	if c.http == nil {
		t := NewTransport()
		t.TLSClientConfig = c.tls
		c.http = &http.Client{Transport: t}
	} else if c.tls != nil {
		return nil, fmt.Errorf("client: WithTLSConfig and WithCAFile configure the default transport; set TLS on the http.Client of WithHTTPClient instead")
	}
	return c, nil
}

// NewTransport returns the transport New uses by default: keep-alive with
// enough idle connections per host for hundreds of concurrent callers (the
// standard default of 2 makes busy callers re-dial), no response compression
// (registry answers are small and usually on a fast network), and no overall
// timeout (blocking queries last minutes; contexts bound calls).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          2048,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}

// HTTPClient returns the http.Client the Client sends with, so that load
// generators can reuse its connections for raw requests.
func (c *Client) HTTPClient() *http.Client { return c.http }

// BaseURL returns the server URL requests are sent to, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// bufPool holds request and response buffers. Buffers that grew past
// maxPooled are dropped so one huge answer does not pin memory forever.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooled = 1 << 20

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > maxPooled {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// do sends one request and decodes a 2xx JSON answer into out (nil: discard).
// A non-2xx answer becomes an *Error.
func (c *Client) do(ctx context.Context, method, pathAndQuery string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+pathAndQuery, rd)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, pathAndQuery, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("client: %w", err) // a *url.Error: it names the method and URL
	}
	defer resp.Body.Close()
	buf := getBuf()
	defer putBuf(buf)
	*buf, err = readAll(resp.Body, *buf, resp.ContentLength)
	if err != nil {
		return fmt.Errorf("client: %s %s: reading answer: %w", method, pathAndQuery, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return parseError(resp.StatusCode, *buf)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(*buf, out); err != nil {
		return fmt.Errorf("client: %s %s: decoding answer: %w", method, pathAndQuery, err)
	}
	if h, ok := out.(interface{ fromHeader(http.Header) }); ok {
		h.fromHeader(resp.Header)
	}
	return nil
}

// readAll appends r to dst, growing it once when the length is known.
func readAll(r io.Reader, dst []byte, n int64) ([]byte, error) {
	if n > 0 && int64(cap(dst)-len(dst)) < n {
		grown := make([]byte, len(dst), len(dst)+int(n)+1)
		copy(grown, dst)
		dst = grown
	}
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		m, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+m]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// RegisterResult is the answer to Register.
type RegisterResult struct {
	Revision uint64   `json:"revision"`
	IDs      []string `json:"ids"`
}

// Register creates or replaces instances (an upsert, atomic for the batch:
// if one is invalid, nothing is written and the *Error's Field names it, e.g.
// "instances[3].port"). IDs in the result are in request order; an instance
// without an ID gets the server's default ID. A register counts as a heartbeat.
func (c *Client) Register(ctx context.Context, instances ...Instance) (RegisterResult, error) {
	if len(instances) == 0 {
		return RegisterResult{}, fmt.Errorf("client: register: no instances")
	}
	buf := getBuf()
	defer putBuf(buf)
	*buf = AppendRegisterBody((*buf)[:0], instances...)
	var res RegisterResult
	err := c.do(ctx, http.MethodPost, "/v1/instances", *buf, &res)
	return res, err
}

type deregisterAnswer struct {
	Revision uint64   `json:"revision"`
	NotFound []string `json:"not_found"`
}

// Deregister removes instances by ID in one atomic request and returns the
// revision of the change and the IDs that did not exist.
func (c *Client) Deregister(ctx context.Context, ids ...string) (revision uint64, notFound []string, err error) {
	if len(ids) == 0 {
		return 0, nil, fmt.Errorf("client: deregister: no ids")
	}
	buf := getBuf()
	defer putBuf(buf)
	*buf = AppendIDsBody((*buf)[:0], ids...)
	var res deregisterAnswer
	err = c.do(ctx, http.MethodPost, "/v1/instances:deregister", *buf, &res)
	return res.Revision, res.NotFound, err
}

// DeregisterOne removes one instance; an unknown ID is an error that
// errors.Is(err, ErrNotFound).
func (c *Client) DeregisterOne(ctx context.Context, id string) (revision uint64, err error) {
	var res deregisterAnswer
	err = c.do(ctx, http.MethodDelete, "/v1/instances/"+url.PathEscape(id), nil, &res)
	return res.Revision, err
}

// Heartbeat renews the TTL of instances and returns the IDs that do not exist
// (re-register those). Heartbeats are not durable state.
func (c *Client) Heartbeat(ctx context.Context, ids ...string) (notFound []string, err error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("client: heartbeat: no ids")
	}
	buf := getBuf()
	defer putBuf(buf)
	*buf = AppendIDsBody((*buf)[:0], ids...)
	var res deregisterAnswer
	err = c.do(ctx, http.MethodPost, "/v1/heartbeats", *buf, &res)
	return res.NotFound, err
}

// Get reads one instance; an unknown ID is an error that errors.Is(err, ErrNotFound).
func (c *Client) Get(ctx context.Context, id string) (Instance, error) {
	var inst Instance
	err := c.do(ctx, http.MethodGet, "/v1/instances/"+url.PathEscape(id), nil, &inst)
	return inst, err
}

// QueryOptions narrow a service query.
type QueryOptions struct {
	// Selector is a Kubernetes-style label selector over the instances'
	// labels (Instance.Labels: metadata and version), e.g.
	// "zone=z1,env!=dev,version=v2".
	Selector string
	// HealthyOnly drops unhealthy and isolated instances.
	HealthyOnly bool
	// Index and Wait make a blocking query: the server holds the request
	// while the service's revision is <= Index, for at most Wait (server
	// default 30s, at most 5m). A query blocks when Wait > 0 or Index > 0.
	Index uint64
	Wait  time.Duration
}

// QueryResult is the state of one service: its revision (the last change to
// any of its instances, 0 for an unknown service) and its instances by ID.
type QueryResult struct {
	Revision  uint64     `json:"revision"`
	Instances []Instance `json:"instances"`
	// Applied is the server's catalog revision when it answered a
	// blocking query with a revision below the index asked for (header
	// X-Sextant-Applied), else 0: a server that applied the index answers
	// the current state, one below it is behind another server.
	Applied uint64 `json:"-"`
}

func (r *QueryResult) fromHeader(h http.Header) {
	if v := h.Get("X-Sextant-Applied"); v != "" {
		r.Applied, _ = strconv.ParseUint(v, 10, 64)
	}
}

// Query returns the instances of one service, optionally as a blocking query.
func (c *Client) Query(ctx context.Context, namespace, service string, opts QueryOptions) (QueryResult, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	var sb strings.Builder
	sb.Grow(64 + len(namespace) + len(service) + len(opts.Selector))
	sb.WriteString("/v1/namespaces/")
	sb.WriteString(url.PathEscape(namespace))
	sb.WriteString("/services/")
	sb.WriteString(url.PathEscape(service))
	sb.WriteString("/instances")
	q := queryString{b: &sb}
	q.add("selector", opts.Selector)
	if opts.HealthyOnly {
		q.add("healthy_only", "true")
	}
	if opts.Index > 0 || opts.Wait > 0 {
		q.add("index", strconv.FormatUint(opts.Index, 10))
	}
	if opts.Wait > 0 {
		q.add("wait", opts.Wait.String())
	}
	var res QueryResult
	err := c.do(ctx, http.MethodGet, sb.String(), nil, &res)
	return res, err
}

// queryString appends URL parameters, skipping empty values.
type queryString struct {
	b   *strings.Builder
	any bool
}

func (q *queryString) add(k, v string) {
	if v == "" {
		return
	}
	if q.any {
		q.b.WriteByte('&')
	} else {
		q.b.WriteByte('?')
		q.any = true
	}
	q.b.WriteString(k)
	q.b.WriteByte('=')
	q.b.WriteString(url.QueryEscape(v))
}

// ListOptions select instances across services. Empty fields match all.
type ListOptions struct {
	Namespace   string
	Service     string
	Selector    string
	HealthyOnly bool
	// Limit is the page size (server default 1000, at most 10000).
	Limit int
	// PageToken continues from a previous page's NextPageToken.
	PageToken string
}

// ListResult is one page of List.
type ListResult struct {
	Revision      uint64     `json:"revision"`
	Instances     []Instance `json:"instances"`
	NextPageToken string     `json:"next_page_token"`
}

// List returns one page of instances across services; pass NextPageToken
// back as PageToken for the next page, or use ListAll.
func (c *Client) List(ctx context.Context, opts ListOptions) (ListResult, error) {
	var sb strings.Builder
	sb.WriteString("/v1/instances")
	q := queryString{b: &sb}
	q.add("namespace", opts.Namespace)
	q.add("service", opts.Service)
	q.add("selector", opts.Selector)
	if opts.HealthyOnly {
		q.add("healthy_only", "true")
	}
	if opts.Limit > 0 {
		q.add("limit", strconv.Itoa(opts.Limit))
	}
	q.add("page_token", opts.PageToken)
	var res ListResult
	err := c.do(ctx, http.MethodGet, sb.String(), nil, &res)
	return res, err
}

// ListAll follows page tokens from opts.PageToken and calls fn with each page
// until the last page, an error, or fn returns an error (which ListAll returns).
func (c *Client) ListAll(ctx context.Context, opts ListOptions, fn func(ListResult) error) error {
	for {
		page, err := c.List(ctx, opts)
		if err != nil {
			return err
		}
		if err := fn(page); err != nil {
			return err
		}
		if page.NextPageToken == "" {
			return nil
		}
		if page.NextPageToken == opts.PageToken {
			return fmt.Errorf("client: list: server returned the same page token %q twice", opts.PageToken)
		}
		opts.PageToken = page.NextPageToken
	}
}

// NamespacesResult lists the namespaces that hold instances.
type NamespacesResult struct {
	Revision   uint64   `json:"revision"`
	Namespaces []string `json:"namespaces"`
}

// Namespaces lists the namespaces.
func (c *Client) Namespaces(ctx context.Context) (NamespacesResult, error) {
	var res NamespacesResult
	err := c.do(ctx, http.MethodGet, "/v1/namespaces", nil, &res)
	return res, err
}

// Service summarises one service of a namespace.
type Service struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Instances int    `json:"instances"`
	Healthy   int    `json:"healthy"`
	Revision  uint64 `json:"revision"`
}

// ServicesResult lists the services of a namespace.
type ServicesResult struct {
	Revision uint64    `json:"revision"`
	Services []Service `json:"services"`
}

// Services lists the services of one namespace ("" means "default").
func (c *Client) Services(ctx context.Context, namespace string) (ServicesResult, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	var res ServicesResult
	err := c.do(ctx, http.MethodGet, "/v1/namespaces/"+url.PathEscape(namespace)+"/services", nil, &res)
	return res, err
}

// Change ops of the change feed.
const (
	OpUpsert = "upsert"
	OpDelete = "delete"
)

// Change is one entry of the change feed: an upsert carries the instance as
// of Revision, a delete carries only the ID.
type Change struct {
	Revision uint64    `json:"revision"`
	Op       string    `json:"op"`
	Instance *Instance `json:"instance,omitempty"`
	ID       string    `json:"id,omitempty"`
}

// ChangesResult is one page of the change feed.
type ChangesResult struct {
	Revision uint64   `json:"revision"`
	Changes  []Change `json:"changes"`
	More     bool     `json:"more"`
}

// Changes returns the changes with revision > since, oldest first, at most
// limit (0: server default 1000). If since is older than the history the
// server keeps, the error is errors.Is(err, ErrCompacted): list in full
// instead and follow from the list's revision.
func (c *Client) Changes(ctx context.Context, since uint64, limit int) (ChangesResult, error) {
	var sb strings.Builder
	sb.WriteString("/v1/changes?since=")
	sb.WriteString(strconv.FormatUint(since, 10))
	if limit > 0 {
		sb.WriteString("&limit=")
		sb.WriteString(strconv.Itoa(limit))
	}
	var res ChangesResult
	err := c.do(ctx, http.MethodGet, sb.String(), nil, &res)
	return res, err
}
