// Package consulapi serves the Consul-compatible HTTP API (`sextant server
// --consul-api`, docs/compat.md): Consul's agent, catalog, health and status
// endpoints over the registry's instance table, so that Consul clients
// (hashicorp's consul/api, Prometheus' consul_sd, consul-template) register
// and discover services in Sextant unchanged.
//
// It owns the mapping between Consul's shapes and the instance record: a
// Consul service is a Sextant service of one namespace (Options.Namespace), a
// tag T is the metadata key tag/T (dnsapi.TagPrefix), Meta is metadata,
// Weights.Passing the weight, the registry's revisions are Consul's
// blocking-query indexes, and Consul tokens are Sextant's ACL tokens, checked
// by the same guard with the same permissions as Sextant's own API. It keeps
// no state of its own: every answer reads the instance table as it then is,
// every write goes through the registry. Consul's KV store is served over
// the KV kind (kv.go, Options.KV), and sessions with it (session.go). What
// it does not serve (Consul's ACL endpoints, prepared queries, Connect's intentions, ...) answers an
// error naming it, never an empty success.
package consulapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/httpapi"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/kv"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// Registry is what the API reads and writes: the instance kind
// (*registry.Registry). Its methods are called from request goroutines;
// the writes block until their change is applied.
type Registry interface {
	// Instances is the instance table the answers read.
	Instances() *registry.Instances
	// Catalog is the catalog the table is part of: its change log wakes
	// the blocking queries that span a namespace.
	Catalog() *catalog.Catalog
	RegisterGuarded(ctx context.Context, ins []*instance.Instance, guard registry.Guard) (int64, error)
	DeregisterGuarded(ctx context.Context, ids []string, guard registry.Guard) (int64, []string, error)
	// SetCheck sets a check's status (a TTL check's update).
	SetCheck(ctx context.Context, instanceID, checkID, status, output string) (int64, error)
	// Heartbeat renews the TTL of instances (the server's own, KeepSelf)
	// and returns the ids it did not find.
	Heartbeat(ctx context.Context, ids []string) ([]string, error)
}

// Defaults of Options.
const (
	DefaultDatacenter = "dc1"
	DefaultNode       = "sextant"
	// DefaultWait and MaxWait bound a blocking query, as Consul does.
	DefaultWait = 5 * time.Minute
	MaxWait     = 10 * time.Minute
)

// Options tune the API; zero values are sensible defaults.
type Options struct {
	// Namespace is the Sextant namespace Consul's services live in
	// (default "default").
	Namespace string
	// Datacenter is the datacenter answers name (default dc1); a query
	// for another one is refused.
	Datacenter string
	// Node names the agent in /v1/agent/self (default "sextant"): the
	// Consul node the services registered through the agent endpoints
	// are on.
	Node string
	// NodeMeta is the agent node's meta (Consul's -node-meta), beside
	// consul-version and consul-network-segment.
	NodeMeta map[string]string
	// Addr is the API's own address, answered by /v1/status/leader and
	// /v1/status/peers.
	Addr string
	// Version is Sextant's version, in /v1/agent/self.
	Version string
	// ACL checks every request (nil: ACLs off). Consul's X-Consul-Token,
	// ?token= and Authorization: Bearer carry a Sextant token.
	ACL *acl.Guard
	// Stale, when set, is how long the shared store of a cluster has been
	// out of reach: answers then say X-Consul-KnownLeader false and the
	// time as X-Consul-LastContact.
	Stale func() time.Duration
	// MaxWaiting caps concurrent blocking queries (default 100000); beyond
	// it they answer 429.
	MaxWaiting int64
	// Logger receives internal errors (nil: discard).
	Logger *slog.Logger
	// KV serves /v1/kv (kv.go); nil: answered 501.
	KV KV
	// SessionTTLMin is the shortest session TTL taken (Consul's
	// session_ttl_min; default kv.MinSessionTTL, at least
	// kv.FloorSessionTTL).
	SessionTTLMin time.Duration
	// CA serves Connect's CA roots and leaf certificates (connect.go);
	// nil: they answer that Connect is not enabled, as Consul's do.
	CA CA
	// ConfigFiles are Consul configuration files whose service
	// definitions the agent registers (LoadConfigFiles) and reloads
	// (/v1/agent/reload); none: reloads answer 501.
	ConfigFiles []string
	// Logs is the server's log for /v1/agent/monitor (monitor.go); nil:
	// answered 501.
	Logs *LogStream
	// EnableScriptChecks accepts script and Docker checks (Consul's
	// enable_script_checks), kept as records and never run
	// (scriptchecks.go); false: refused, as Consul refuses them.
	EnableScriptChecks bool
}

// API is the Consul-compatible HTTP handler over a registry.
type API struct {
	reg     Registry
	opts    Options
	acl     *acl.Guard
	log     *slog.Logger
	mux     *http.ServeMux
	waiting atomic.Int64
	leaves  leaves // Connect leaf certificates handed out (connect.go)

	// stopping ends every blocking query at shutdown: they answer the
	// current state at once instead of holding the drain.
	stopping context.Context
	stop     context.CancelFunc
}

// New returns the API over reg, which must be loaded: it serves at once.
func New(reg Registry, opts Options) (*API, error) {
	if opts.Namespace == "" {
		opts.Namespace = naming.DefaultNamespace
	}
	if !naming.ValidName(opts.Namespace) {
		return nil, errors.New("consulapi: namespace " + strconv.Quote(opts.Namespace) + " is not a valid name: 1..128 chars of [a-z0-9-._], starting and ending with a letter or digit")
	}
	if opts.Datacenter == "" {
		opts.Datacenter = DefaultDatacenter
	}
	if opts.Node == "" {
		opts.Node = DefaultNode
	}
	if opts.SessionTTLMin == 0 {
		opts.SessionTTLMin = kv.MinSessionTTL
	}
	if opts.SessionTTLMin < kv.FloorSessionTTL || opts.SessionTTLMin > kv.MaxSessionTTL {
		return nil, fmt.Errorf("consulapi: the least session TTL %v must be between %v and %v", opts.SessionTTLMin, kv.FloorSessionTTL, kv.MaxSessionTTL)
	}
	if opts.MaxWaiting <= 0 {
		opts.MaxWaiting = 100000
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	a := &API{reg: reg, opts: opts, acl: opts.ACL, log: opts.Logger, mux: http.NewServeMux()}
	if a.acl == nil {
		a.acl = acl.New(acl.Options{}) // off: every check passes
	}
	a.stopping, a.stop = context.WithCancel(context.Background())
	a.routes()
	return a, nil
}

// Shutdown releases every blocking query; register it with
// http.Server.RegisterOnShutdown.
func (a *API) Shutdown() { a.stop() }

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// handler serves one route; an error is answered by the route's wrapper.
type handler func(w http.ResponseWriter, r *http.Request) error

func (a *API) routes() {
	a.handle("PUT /v1/agent/service/register", a.register)
	a.handle("PUT /v1/agent/service/deregister/{id}", a.deregister)
	a.handle("PUT /v1/agent/service/maintenance/{id}", a.maintenance)
	a.handle("GET /v1/agent/services", a.agentServices)
	a.handle("GET /v1/agent/service/{id}", a.agentService)
	a.handle("GET /v1/agent/checks", a.agentChecks)
	a.handle("GET /v1/agent/self", a.agentSelf)
	a.handle("GET /v1/agent/metrics", a.agentMetrics)
	a.handle("GET /v1/agent/host", a.agentHost)
	if a.opts.Logs != nil {
		a.handle("GET /v1/agent/monitor", a.agentMonitor)
	}
	if len(a.opts.ConfigFiles) > 0 {
		a.handle("PUT /v1/agent/reload", a.agentReload)
	}
	a.handle("PUT /v1/agent/check/pass/{id}", a.checkUpdate("passing"))
	a.handle("PUT /v1/agent/check/warn/{id}", a.checkUpdate("warning"))
	a.handle("PUT /v1/agent/check/fail/{id}", a.checkUpdate("critical"))
	a.handle("PUT /v1/agent/check/update/{id}", a.checkUpdate(""))
	a.handle("GET /v1/catalog/services", a.catalogServices)
	a.handle("GET /v1/catalog/service/{name}", a.catalogService)
	a.handle("GET /v1/catalog/datacenters", a.datacenters)
	a.handle("GET /v1/health/service/{name}", a.healthService)
	a.handle("GET /v1/health/checks/{name}", a.healthChecks)
	a.handle("GET /v1/health/state/{state}", a.healthState)
	a.handle("GET /v1/agent/health/service/id/{id}", a.agentHealthByID)
	a.handle("GET /v1/agent/health/service/name/{name}", a.agentHealthByName)
	// A literal path beside a GET {id} route: without this, a GET of it
	// would read "register" as an id (404) rather than answer 405.
	a.mux.HandleFunc("GET /v1/agent/service/register", a.noRoute)
	a.handleOpen("GET /v1/status/leader", a.leader)
	a.handleOpen("GET /v1/status/peers", a.peers)
	a.kvRoutes()
	a.sessionRoutes()
	a.nodeRoutes()
	a.configRoutes()
	a.agentCheckRoutes()
	a.connectRoutes()
	for _, u := range unsupported {
		if (u.prefix == "/v1/kv/" || u.prefix == "/v1/session/" || u.prefix == "/v1/txn") && a.opts.KV != nil {
			continue // served: another method answers 405
		}
		if u.prefix == "/v1/agent/monitor" && a.opts.Logs != nil || u.prefix == "/v1/agent/reload" && len(a.opts.ConfigFiles) > 0 {
			continue
		}
		if nodePaths[u.prefix] && a.nodeStore() != nil || configPaths[u.prefix] && a.opts.KV != nil {
			continue // served (node.go, config.go)
		}
		a.mux.HandleFunc(u.prefix, func(w http.ResponseWriter, r *http.Request) {
			writeText(w, http.StatusNotImplemented, "Sextant's Consul-compatible API does not serve "+u.what+" ("+r.Method+" "+r.URL.Path+"); docs/compat.md lists what it serves")
		})
	}
	a.mux.HandleFunc("/", a.noRoute)
}

// noRoute answers a request no route takes: 405 with Allow when its path
// is a route's with another method (the mux prefers this catch-all to its
// own 405), else 404.
func (a *API) noRoute(w http.ResponseWriter, r *http.Request) {
	// PUT first: GET /v1/agent/service/register is a route of this
	// handler's, whose path takes PUT.
	for _, m := range []string{http.MethodPut, http.MethodGet} {
		if m == r.Method || m == http.MethodGet && r.Method == http.MethodHead {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pat := a.mux.Handler(probe); strings.HasPrefix(pat, m+" ") {
			w.Header().Set("Allow", m)
			writeText(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+"; allowed: "+m)
			return
		}
	}
	writeText(w, http.StatusNotFound, "no endpoint "+r.Method+" "+r.URL.Path+" in Sextant's Consul-compatible API; docs/compat.md lists what it serves")
}

// unsupported are the parts of Consul's API Sextant does not serve: each
// answers 501 naming what it is.
// nodePaths are served when the KV kind keeps the nodes (node.go).
var nodePaths = map[string]bool{
	"/v1/catalog/register": true, "/v1/catalog/deregister": true, "/v1/catalog/nodes": true,
	"/v1/catalog/node/": true, "/v1/catalog/node-services/": true, "/v1/health/node/": true,
}

var unsupported = []struct{ prefix, what string }{
	{"/v1/kv/", "Consul's KV store"},
	{"/v1/acl/", "Consul's ACL endpoints (tokens and policies are Sextant's: sextant acl, /v1/acl on --http)"},
	{"/v1/session/", "sessions"},
	{"/v1/query", "prepared queries"},
	{"/v1/query/", "prepared queries"},
	{"/v1/connect/", "Connect's intentions and CA configuration (service mesh: Sextant's is xDS, docs/controlplane.md; the CA roots are served)"},
	{"/v1/agent/connect/", "Connect's authorization and intentions (Sextant's are its RBAC policies, docs/security.md; the CA roots and leaves are served)"},
	{"/v1/event/", "events"},
	{"/v1/txn", "transactions"},
	{"/v1/snapshot", "snapshots"},
	{"/v1/operator/", "operator endpoints"},
	{"/v1/coordinate/", "network coordinates"},
	{"/v1/config", "config entries"},
	{"/v1/config/", "config entries"},
	{"/v1/namespace", "namespaces (Consul Enterprise)"},
	{"/v1/namespace/", "namespaces (Consul Enterprise)"},
	{"/v1/namespaces", "namespaces (Consul Enterprise)"},
	{"/v1/partition/", "admin partitions (Consul Enterprise)"},
	{"/v1/peering/", "cluster peering"},
	{"/v1/internal/", "Consul's internal UI endpoints"},
	{"/v1/discovery-chain/", "discovery chains (Connect)"},
	{"/v1/catalog/register", "catalog registers (register through /v1/agent/service/register)"},
	{"/v1/catalog/deregister", "catalog deregisters (deregister through /v1/agent/service/deregister/{id})"},
	{"/v1/catalog/nodes", "nodes (Sextant has no nodes: each address is a node of its own)"},
	{"/v1/catalog/node/", "nodes (Sextant has no nodes: each address is a node of its own)"},
	{"/v1/catalog/node-services/", "nodes (Sextant has no nodes: each address is a node of its own)"},
	{"/v1/catalog/gateway-services/", "gateway services"},
	{"/v1/health/node/", "node health (Sextant has no nodes)"},
	{"/v1/health/ingress/", "ingress gateways"},
	{"/v1/agent/members", "gossip members (Sextant has no gossip pool)"},
	{"/v1/agent/join/", "gossip joins (Sextant has no gossip pool)"},
	{"/v1/agent/leave", "agent leaves"},
	{"/v1/agent/force-leave/", "gossip (Sextant has no gossip pool)"},
	{"/v1/agent/reload", "agent reloads (a server started with --consul-config-file reloads its files)"},
	{"/v1/agent/token/", "agent tokens"},
	{"/v1/agent/monitor", "log streaming"},
	{"/v1/agent/version", "the agent version endpoint (see /v1/agent/self)"},
	{"/v1/lock", "locks"},
}

// handle registers h for pattern ("METHOD /path") behind the ACL guard.
func (a *API) handle(pattern string, h handler) { a.handleWith(pattern, h, false) }

// handleOpen is handle for a route anonymous callers may reach with ACLs
// on, as Consul's status endpoints are; a token sent must still be valid.
func (a *API) handleOpen(pattern string, h handler) { a.handleWith(pattern, h, true) }

func (a *API) handleWith(pattern string, h handler, open bool) {
	op := "consul " + pattern
	begin := a.acl.Begin
	if open {
		begin = a.acl.BeginOpen
	}
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		r, err := begin(withToken(r), op)
		if err == nil {
			// Whatever this request reads holds every revision a request
			// answered before it could have seen part of.
			a.reg.Catalog().Settle()
			err = h(sw, r)
		}
		if err != nil {
			a.writeError(sw, r, err)
		}
		a.acl.End(r, sw.code)
	})
}

// withToken carries a Consul token (?token=, X-Consul-Token) to the guard
// as the Authorization header it reads, in Consul's order of precedence;
// Authorization: Bearer itself needs nothing.
func withToken(r *http.Request) *http.Request {
	tok := ""
	if strings.Contains(r.URL.RawQuery, "token=") {
		tok = r.URL.Query().Get("token")
	}
	if tok == "" {
		tok = r.Header.Get("X-Consul-Token")
	}
	if tok == "" {
		return r
	}
	r2 := *r
	r2.Header = r.Header.Clone()
	r2.Header.Set("Authorization", "Bearer "+tok)
	return &r2
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (the monitor
// stream flushes each line).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// httpError is an answer other than 200 with its text, as Consul answers
// errors: a status and a plain-text body.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return "consulapi: " + e.msg }

func badRequest(msg string) error { return &httpError{http.StatusBadRequest, msg} }

func notFound(msg string) error { return &httpError{http.StatusNotFound, msg} }

// writeError answers err. Sextant's refusals keep their status but for
// authentication: Consul answers 403 "ACL not found" for an unknown token
// and "Permission denied" for a missing one, and its clients look for
// those words.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	var refusal *acl.Error
	var fe *instance.FieldError
	switch {
	case errors.As(err, &he):
		writeText(w, he.status, he.msg)
		return
	case errors.As(err, &refusal) && errors.Is(err, acl.ErrUnauthenticated):
		word := "Permission denied"
		if r.Header.Get("Authorization") != "" {
			word = "ACL not found"
		}
		writeText(w, http.StatusForbidden, word+": "+refusal.Msg)
		return
	case errors.As(err, &fe):
		writeText(w, http.StatusBadRequest, fe.Msg)
		return
	}
	status, msg := httpapi.StatusOf(err)
	if status >= 500 {
		a.log.Error("request failed", "path", r.URL.Path, "err", err)
	}
	if refusal != nil && refusal.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(refusal.RetryAfter/time.Second), 10))
	}
	writeText(w, status, msg)
}

func writeText(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Del("X-Consul-Index")
	w.WriteHeader(status)
	w.Write([]byte(msg + "\n"))
}

// leader answers the API's own address: every Sextant server answers
// Consul's API itself, so each is its own leader.
func (a *API) leader(w http.ResponseWriter, r *http.Request) error {
	if err := a.checkScope(r); err != nil {
		return err
	}
	return writeValue(w, strconv.Quote(a.opts.Addr))
}

func (a *API) peers(w http.ResponseWriter, r *http.Request) error {
	if err := a.checkScope(r); err != nil {
		return err
	}
	return writeValue(w, "["+strconv.Quote(a.opts.Addr)+"]")
}

func (a *API) datacenters(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Authenticated(r.Context()); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	return writeValue(w, "["+strconv.Quote(a.opts.Datacenter)+"]")
}

// clientHost is the address of the client of r: the host of a service
// registered without an Address, as Consul takes its agent's node address.
func clientHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
