// Package httpapi serves the registry's HTTP API (docs/api.md):
// routing, request limits, strict JSON decoding, and the mapping of errors to
// statuses and codes. It is the only package that knows HTTP; writes go to
// the registry and reads to its catalog.
package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
)

// MaxBody is the largest request body accepted.
const MaxBody = 16 << 20

// Options tune the API; zero values are sensible defaults.
type Options struct {
	// MaxWaiting caps concurrent blocking queries (default 100000); beyond
	// it they answer 429.
	MaxWaiting int64
	// Logger receives request errors (nil: discard).
	Logger *slog.Logger
	// Metrics registers request metrics; Gatherer serves /metrics. Both nil:
	// a private registry.
	Metrics  prometheus.Registerer
	Gatherer prometheus.Gatherer
	// ACL guards every route but /healthz and /readyz (nil: ACLs off and
	// no /v1/acl routes). Its tables must be registered with the write engine
	// (commit.Options.Tables = ACL.Tables()).
	ACL *acl.Guard
}

// Sync is how current this server's catalog is, for the servers of a
// cluster over a shared store (internal/cluster implements it). Both
// methods are called from request goroutines and must not block.
type Sync interface {
	// Ready reports whether the catalog has caught up with the store
	// since the server started.
	Ready() bool
	// Stale is how long the store has been out of reach (0: it answers).
	// Reads are then served from the catalog as it is, marked stale.
	Stale() time.Duration
}

// StaleHeader marks an answer served while the shared store is out of
// reach: its value is how long, in seconds.
const StaleHeader = "X-Sextant-Stale"

// AppliedHeader carries the server's catalog revision on a blocking query
// answered with a revision below the index it was given: the caller may
// take that answer as current only if the server has applied its index.
const AppliedHeader = "X-Sextant-Applied"

// API is the HTTP handler of the registry.
type API struct {
	reg  atomic.Pointer[backend] // nil until ready
	sync atomic.Pointer[syncBox] // nil: a single server
	// pushStatus serves /v1/push/status; nil: no control plane.
	pushStatus atomic.Pointer[http.Handler]
	// kv: the KV kind served at /v1/namespaces/{ns}/kv (kv.go); nil: none.
	kv atomic.Pointer[KVStore]
	// pushWait: config writes wait for these to publish them; nil: no control plane.
	pushWait atomic.Pointer[[]PushWaiter]
	// issuer serves /v1/identity; nil: no certificate authority.
	issuer atomic.Pointer[issuerBox]
	// sources are what else /readyz waits for (copy on write).
	sources atomic.Pointer[[]namedSource]
	opts    Options
	acl     *acl.Guard
	log     *slog.Logger
	mux     *http.ServeMux
	waiting atomic.Int64
	allowed map[string]string // path -> its methods, for 405 answers

	// stopping ends every blocking query at shutdown: they answer the
	// current state at once instead of holding the drain.
	stopping context.Context
	stop     context.CancelFunc

	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// New returns the API; it answers 503 until SetRegistry.
func New(opts Options) *API {
	if opts.MaxWaiting <= 0 {
		opts.MaxWaiting = 100000
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		r := prometheus.NewRegistry()
		opts.Metrics, opts.Gatherer = r, r
	}
	a := &API{opts: opts, log: opts.Logger, mux: http.NewServeMux(), allowed: map[string]string{}, acl: opts.ACL}
	if a.acl == nil {
		a.acl = acl.New(acl.Options{}) // off: every check passes, nothing is audited
	}
	a.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sextant_http_requests_total", Help: "HTTP requests by route and status code.",
	}, []string{"route", "code"})
	a.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sextant_http_request_seconds", Help: "HTTP request latency by route.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"route"})
	opts.Metrics.MustRegister(a.requests, a.latency)
	a.stopping, a.stop = context.WithCancel(context.Background())
	a.routes()
	return a
}

// Shutdown releases every blocking query; register it with
// http.Server.RegisterOnShutdown.
func (a *API) Shutdown() { a.stop() }

// SetPushStatus mounts the control plane's push status at /v1/push/status.
// Before SetRegistry.
func (a *API) SetPushStatus(h http.Handler) { a.pushStatus.Store(&h) }

// Source is one more condition of readiness: a source of the catalog's
// content (the Kubernetes sync) that must have read its first full state
// before this server's answers are the truth. Synced is called from
// request goroutines and must not block.
type Source interface {
	Synced() bool
}

// AddSource makes /readyz answer 503 {"status":"syncing","source":name}
// until src has synced. Safe while serving.
func (a *API) AddSource(name string, src Source) {
	for {
		old := a.sources.Load()
		var next []namedSource
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, namedSource{name, src})
		if a.sources.CompareAndSwap(old, &next) {
			return
		}
	}
}

type namedSource struct {
	name string
	src  Source
}

// unsynced is the name of the first source not synced yet, "" when all are.
func (a *API) unsynced() string {
	if srcs := a.sources.Load(); srcs != nil {
		for _, s := range *srcs {
			if !s.src.Synced() {
				return s.name
			}
		}
	}
	return ""
}

type syncBox struct{ s Sync }

// SetSync makes readiness wait for the catalog to catch up with a shared
// store, and marks reads stale while it is out of reach. Before
// SetRegistry.
func (a *API) SetSync(s Sync) { a.sync.Store(&syncBox{s}) }

// stale is how long the shared store has been out of reach (0: it answers,
// or there is none).
func (a *API) stale() time.Duration {
	if sb := a.sync.Load(); sb != nil {
		return sb.s.Stale()
	}
	return 0
}

// backend is what the API serves from once the server is ready: the write
// engine every kind's writes go through (embedded: Submit, SubmitChecked,
// DryRun, Catalog, Revision) and the instance kind.
type backend struct {
	*commit.Engine
	inst *registry.Registry
}

// SetRegistry makes the API ready, serving reg and the write engine it
// writes through.
func (a *API) SetRegistry(reg *registry.Registry) {
	a.reg.Store(&backend{Engine: reg.Engine(), inst: reg})
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

type handler func(w http.ResponseWriter, r *http.Request, reg *backend) error

func (a *API) routes() {
	a.handle("POST", "/v1/instances", a.register)
	a.handle("GET", "/v1/instances", a.listInstances)
	a.handle("POST", "/v1/instances:deregister", a.deregisterBatch)
	a.handle("GET", "/v1/instances/{id}", a.getInstance)
	a.handle("DELETE", "/v1/instances/{id}", a.deregisterOne)
	a.handle("PUT", "/v1/instances/{id}/checks/{check}", a.setCheck)
	a.handle("POST", "/v1/heartbeats", a.heartbeat)
	a.handle("GET", "/v1/namespaces", a.namespaces)
	a.handle("GET", "/v1/namespaces/{ns}/services", a.services)
	a.handle("GET", "/v1/namespaces/{ns}/services/{service}/instances", a.queryService)
	a.handle("GET", "/v1/changes", a.changes)
	a.handle("GET", "/v1/sd/prometheus", a.prometheusSD)
	a.handle("GET", "/v1/push/status", func(w http.ResponseWriter, r *http.Request, _ *backend) error {
		// Push status names every subscriber and resource: every namespace.
		if err := acl.Require(r, acl.Permission{Resource: acl.Push, Access: acl.Read}); err != nil {
			return err
		}
		h := a.pushStatus.Load()
		if h == nil {
			return &apiError{http.StatusNotFound, "not_found", "this server runs no control plane", ""}
		}
		(*h).ServeHTTP(w, r)
		return nil
	})
	a.handle("POST", "/v1/config:apply", a.applyConfig)
	a.handle("GET", "/v1/config", a.listConfig)
	a.handle("GET", "/v1/config/{kind}/{ns}/{name}", a.getConfig)
	a.handle("PUT", "/v1/config/{kind}/{ns}/{name}", a.putConfig)
	a.handle("DELETE", "/v1/config/{kind}/{ns}/{name}", a.deleteConfig)
	a.handle("POST", "/v1/secrets", a.putSecret)
	a.handle("GET", "/v1/secrets", a.listSecrets)
	a.handle("GET", "/v1/secrets/{ns}/{name}", a.getSecret)
	a.handle("DELETE", "/v1/secrets/{ns}/{name}", a.deleteSecret)
	a.kvRoutes()
	if a.opts.ACL != nil {
		a.aclRoutes()
	}
	a.placementRoutes()
	a.identityRoutes()
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	a.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if a.reg.Load() == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"loading"}` + "\n"))
			return
		}
		if name := a.unsynced(); name != "" {
			// Its first full read is not in the catalog yet: answers
			// would miss what it holds (a pod's instances, its routes).
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"syncing","source":` + strconv.Quote(name) + `}` + "\n"))
			return
		}
		if sb := a.sync.Load(); sb != nil {
			if !sb.s.Ready() {
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"status":"catching_up"}` + "\n"))
				return
			}
			if d := sb.s.Stale(); d > 0 {
				// Still ready: reads are served from the catalog, marked
				// stale; taking every server out would serve nothing.
				fmt.Fprintf(w, `{"status":"stale","store_unreachable_seconds":%.1f}`+"\n", d.Seconds())
				return
			}
		}
		w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
	metrics := promhttp.HandlerFor(a.opts.Gatherer, promhttp.HandlerOpts{})
	a.mux.Handle("GET /metrics", a.acl.Wrap("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := acl.Authenticated(r.Context()); err != nil {
			acl.WriteError(w, err)
			return
		}
		metrics.ServeHTTP(w, r)
	})))
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{http.StatusNotFound, "not_found", "no route for " + r.Method + " " + r.URL.Path, ""})
	})
}

// handle registers h for method and path, with metrics, readiness, the ACL
// guard (authentication, rate limit, audit; h calls acl.Require) and error
// mapping, and a JSON 405 for the path's other methods.
func (a *API) handle(method, path string, h handler) { a.handleWith(method, path, h, false) }

// handleOpen is handle for a route anonymous callers may reach with ACLs
// on (the bootstrap); its handler makes the decision.
func (a *API) handleOpen(method, path string, h handler) { a.handleWith(method, path, h, true) }

func (a *API) handleWith(method, path string, h handler, open bool) {
	route := method + " " + path
	begin := a.acl.Begin
	if open {
		begin = a.acl.BeginOpen
	}
	counter := map[int]prometheus.Counter{}
	var mu sync.Mutex
	ok := a.requests.WithLabelValues(route, "200")
	count := func(code int) prometheus.Counter {
		if code == http.StatusOK {
			return ok // most answers: no lock shared by every connection
		}
		mu.Lock()
		defer mu.Unlock()
		c := counter[code]
		if c == nil {
			c = a.requests.WithLabelValues(route, strconv.Itoa(code))
			counter[code] = c
		}
		return c
	}
	lat := a.latency.WithLabelValues(route)
	a.mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK, conn: joinOf(r)}
		reg := a.reg.Load()
		if d := a.stale(); d > 0 {
			sw.Header().Set(StaleHeader, strconv.FormatFloat(d.Seconds(), 'f', 1, 64))
		}
		var err error
		guarded := false
		if reg == nil {
			// Before the load no token is known: answer 503, not 401.
			err = &apiError{http.StatusServiceUnavailable, "unavailable", "the registry is still loading", ""}
		} else if r, err = begin(r, route); err == nil {
			guarded = true
			// Whatever this request reads holds every revision a request
			// answered before it could have seen part of (catalog.Settle).
			reg.Catalog().Settle()
			err = h(sw, r, reg)
		} else {
			guarded = true
		}
		if err != nil {
			ae := a.toAPIError(err)
			if ae.status >= 500 && ae.status != http.StatusInsufficientStorage { // the engine logs a full disk once
				a.log.Error("request failed", "route", route, "err", err)
			}
			var refusal *acl.Error
			if errors.As(err, &refusal) && refusal.RetryAfter > 0 {
				sw.Header().Set("Retry-After", strconv.FormatInt(int64(refusal.RetryAfter/time.Second), 10))
			}
			if ae.status == http.StatusInsufficientStorage {
				sw.Header().Set("Retry-After", noSpaceRetryAfter)
			}
			writeError(sw, ae)
		}
		if guarded {
			a.acl.End(r, sw.code)
		}
		count(sw.code).Inc()
		lat.Observe(time.Since(start).Seconds())
	})
	if prev, ok := a.allowed[path]; ok {
		a.allowed[path] = prev + ", " + method
		return
	}
	a.allowed[path] = method
	a.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", a.allowed[path])
		writeError(w, &apiError{http.StatusMethodNotAllowed, "method_not_allowed",
			"method " + r.Method + " not allowed on " + path + "; allowed: " + a.allowed[path], ""})
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
	conn *joinConn // the connection, when it can join writes (conn.go)
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// apiError is an error with its HTTP status and API code.
type apiError struct {
	status int
	code   string
	msg    string
	field  string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(field, format string, args ...any) error {
	return &apiError{http.StatusBadRequest, "invalid_argument", fmt.Sprintf(format, args...), field}
}

func (a *API) toAPIError(err error) *apiError {
	var ae *apiError
	var fe *instance.FieldError
	var mbe *http.MaxBytesError
	var refusal *acl.Error
	var afe *acl.FieldError
	var owned *registry.OwnedError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &refusal):
		return &apiError{refusal.Status(), refusal.Code, refusal.Msg, ""}
	case errors.As(err, &afe):
		return &apiError{http.StatusBadRequest, "invalid_argument", afe.Msg, afe.Field}
	case errors.As(err, &fe):
		return &apiError{http.StatusBadRequest, "invalid_argument", fe.Msg, fe.Field}
	case errors.As(err, &mbe):
		return &apiError{http.StatusRequestEntityTooLarge, "payload_too_large",
			"request body exceeds " + strconv.FormatInt(mbe.Limit, 10) + " bytes", ""}
	case errors.As(err, &owned):
		return &apiError{http.StatusConflict, "owned", strings.TrimPrefix(owned.Error(), "registry: "), ""}
	case errors.Is(err, registry.ErrNotFound):
		return &apiError{http.StatusNotFound, "not_found", strings.TrimPrefix(err.Error(), "registry: not found: "), ""}
	case errors.Is(err, store.ErrConflict):
		return &apiError{http.StatusConflict, "conflict", strings.TrimPrefix(err.Error(), "store: "), ""}
	case errors.Is(err, catalog.ErrCompacted):
		return &apiError{http.StatusGone, "compacted", strings.TrimPrefix(err.Error(), "catalog: "), "since"}
	case errors.Is(err, store.ErrNoSpace):
		return &apiError{http.StatusInsufficientStorage, "insufficient_storage",
			"the write was refused and nothing was written: " + strings.TrimPrefix(err.Error(), "commit: commit: "), ""}
	case errors.Is(err, store.ErrWriteFailed):
		return &apiError{http.StatusServiceUnavailable, "unavailable",
			"the store failed to write, so this write is not acknowledged (it may or may not have been stored): " + strings.TrimPrefix(err.Error(), "commit: commit: "), ""}
	case errors.Is(err, store.ErrUnavailable):
		return &apiError{http.StatusServiceUnavailable, "unavailable",
			"the shared store is unreachable, so this write is not acknowledged (it may or may not have been stored; retry it once the store is back): " + err.Error(), ""}
	case errors.Is(err, commit.ErrClosed):
		return &apiError{http.StatusServiceUnavailable, "unavailable", "the server is shutting down", ""}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &apiError{http.StatusServiceUnavailable, "unavailable", "request cancelled before it was queued: " + err.Error(), ""}
	}
	return &apiError{http.StatusInternalServerError, "internal", err.Error(), ""}
}

// StatusOf is the HTTP status and message this API answers err with, for
// the other HTTP front doors over the same kinds (the Consul-compatible
// API), so that an error means the same status everywhere.
func StatusOf(err error) (status int, msg string) {
	e := (*API)(nil).toAPIError(err)
	return e.status, e.msg
}

func writeError(w http.ResponseWriter, e *apiError) {
	body := struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field,omitempty"`
		} `json:"error"`
	}{}
	body.Error.Code, body.Error.Message, body.Error.Field = e.code, e.msg, e.field
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("X-Sextant-Revision")
	w.WriteHeader(e.status)
	w.Write(append(b, '\n'))
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// Header values shared by every answer; net/http copies the header map
// before it writes it, and never modifies the values.
var contentTypeJSON = []string{"application/json"}

// setAnswerHeaders sets the headers of a JSON answer of n bytes. The map is
// assigned directly (the names are canonical): Header.Set would allocate a
// value slice per header per request. net/http computes Content-Length
// itself for an answer that fits its 2 KiB buffer.
func setAnswerHeaders(h http.Header, rev int64, n int) {
	h["Content-Type"] = contentTypeJSON
	h["X-Sextant-Revision"] = []string{strconv.FormatInt(rev, 10)}
	if n >= 2048 {
		h["Content-Length"] = []string{strconv.Itoa(n)}
	}
}

// writeBody sends a prepared JSON body with the revision header.
func writeBody(w http.ResponseWriter, rev int64, body []byte) {
	setAnswerHeaders(w.Header(), rev, len(body))
	send(w, body)
}

// streamJSON sends a large body piece by piece through a 64 KiB buffer, so
// an answer of megabytes is never built in one growing slice.
func streamJSON(w http.ResponseWriter, rev int64, write func(bw *bufio.Writer)) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Sextant-Revision", strconv.FormatInt(rev, 10))
	if c := holdWrites(w); c != nil {
		defer c.release()
	}
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(w)
	write(bw)
	bw.WriteByte('\n')
	bw.Flush()
	bw.Reset(nil)
	writerPool.Put(bw)
}

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// writeJSON sends a body built by fill, with the revision header.
func writeJSON(w http.ResponseWriter, rev int64, fill func(b []byte) []byte) {
	bp := bufPool.Get().(*[]byte)
	b := fill((*bp)[:0])
	b = append(b, '\n')
	setAnswerHeaders(w.Header(), rev, len(b))
	send(w, b)
	if cap(b) <= 4<<20 {
		*bp = b
		bufPool.Put(bp)
	}
}
