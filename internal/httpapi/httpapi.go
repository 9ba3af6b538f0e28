// Package httpapi serves the registry's HTTP API (shared/API.md, docs/api.md):
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

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/registry"
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
}

// API is the HTTP handler of the registry.
type API struct {
	reg     atomic.Pointer[registry.Registry] // nil until ready
	opts    Options
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
	a := &API{opts: opts, log: opts.Logger, mux: http.NewServeMux(), allowed: map[string]string{}}
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

// SetRegistry makes the API ready, serving reg.
func (a *API) SetRegistry(reg *registry.Registry) { a.reg.Store(reg) }

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

type handler func(w http.ResponseWriter, r *http.Request, reg *registry.Registry) error

func (a *API) routes() {
	a.handle("POST", "/v1/instances", a.register)
	a.handle("GET", "/v1/instances", a.listInstances)
	a.handle("POST", "/v1/instances:deregister", a.deregisterBatch)
	a.handle("GET", "/v1/instances/{id}", a.getInstance)
	a.handle("DELETE", "/v1/instances/{id}", a.deregisterOne)
	a.handle("POST", "/v1/heartbeats", a.heartbeat)
	a.handle("GET", "/v1/namespaces", a.namespaces)
	a.handle("GET", "/v1/namespaces/{ns}/services", a.services)
	a.handle("GET", "/v1/namespaces/{ns}/services/{service}/instances", a.queryService)
	a.handle("GET", "/v1/changes", a.changes)
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
		w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(a.opts.Gatherer, promhttp.HandlerOpts{}))
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{http.StatusNotFound, "not_found", "no route for " + r.Method + " " + r.URL.Path, ""})
	})
}

// handle registers h for method and path, with metrics, readiness and error
// mapping, and a JSON 405 for the path's other methods.
func (a *API) handle(method, path string, h handler) {
	route := method + " " + path
	counter := map[int]prometheus.Counter{}
	var mu sync.Mutex
	count := func(code int) prometheus.Counter {
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
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		reg := a.reg.Load()
		var err error
		if reg == nil {
			err = &apiError{http.StatusServiceUnavailable, "unavailable", "the registry is still loading", ""}
		} else {
			err = h(sw, r, reg)
		}
		if err != nil {
			ae := a.toAPIError(err)
			if ae.status >= 500 {
				a.log.Error("request failed", "route", route, "err", err)
			}
			writeError(sw, ae)
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
	var fe *registry.FieldError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &fe):
		return &apiError{http.StatusBadRequest, "invalid_argument", fe.Msg, fe.Field}
	case errors.As(err, &mbe):
		return &apiError{http.StatusRequestEntityTooLarge, "payload_too_large",
			"request body exceeds " + strconv.FormatInt(mbe.Limit, 10) + " bytes", ""}
	case errors.Is(err, catalog.ErrCompacted):
		return &apiError{http.StatusGone, "compacted", strings.TrimPrefix(err.Error(), "catalog: "), "since"}
	case errors.Is(err, registry.ErrClosed):
		return &apiError{http.StatusServiceUnavailable, "unavailable", "the server is shutting down", ""}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &apiError{http.StatusServiceUnavailable, "unavailable", "request cancelled before it was queued: " + err.Error(), ""}
	}
	return &apiError{http.StatusInternalServerError, "internal", err.Error(), ""}
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

// writeBody sends a prepared JSON body with the revision header.
func writeBody(w http.ResponseWriter, rev int64, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Sextant-Revision", strconv.FormatInt(rev, 10))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// streamJSON sends a large body piece by piece through a 64 KiB buffer, so
// an answer of megabytes is never built in one growing slice.
func streamJSON(w http.ResponseWriter, rev int64, write func(bw *bufio.Writer)) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Sextant-Revision", strconv.FormatInt(rev, 10))
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
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Sextant-Revision", strconv.FormatInt(rev, 10))
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
	if cap(b) <= 4<<20 {
		*bp = b
		bufPool.Put(bp)
	}
}
