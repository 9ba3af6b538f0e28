package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/browserguard"
	"github.com/sextant-mesh/sextant/internal/calllog"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

// AdminHandler serves the admin API (docs/gateway.md, "Admin API"): health,
// /metrics, /v1/config and, with a call log, /v1/calls, /v1/calls/stats,
// /v1/calls/endpoints and POST /v1/rbac:dry-run (dryrun.go).
func (g *Gateway) AdminHandler(log *calllog.Log) http.Handler {
	return g.AdminHandlerWith(log, nil)
}

// AdminAccess is what an admin request reads: the calls of services in a
// namespace ("*": every namespace), or the gateway's own state (config,
// metrics, profiles).
type AdminAccess struct {
	Calls     bool
	Namespace string
}

// AdminAuthorizer decides whether a request may read what it asks
// (nil error), answering an error that names why not; the gateway asks the
// server that issued the token (cmd/sextant's --admin-acl). Called on the
// request's goroutine; it may block on the network.
type AdminAuthorizer func(r *http.Request, a AdminAccess) (status int, err error)

// AdminHandlerWith is AdminHandler with every route but /healthz and
// /readyz checked by authorize (nil: open, for loopback-only admins), and
// with profiles when authorize is set.
func (g *Gateway) AdminHandlerWith(log *calllog.Log, authorize AdminAuthorizer) http.Handler {
	return g.AdminHandlerOptions(log, AdminOptions{Authorize: authorize, Pprof: authorize != nil})
}

// AdminOptions configure the admin API.
type AdminOptions struct {
	// Authorize checks every route but /healthz and /readyz (nil: open,
	// for loopback-only admins).
	Authorize AdminAuthorizer
	// Origins are the web origins (scheme://host:port) whose pages may
	// read the GET answers through a browser (CORS): the web console's,
	// the registry server's. Others' pages may not: they would read the
	// calls of whoever visits them from a machine that reaches the admin.
	Origins []string
	// Pprof serves /debug/pprof/: the process's memory, open to whoever
	// reaches the admin unless Authorize is set.
	Pprof bool
	// Browser, when set, refuses what it refuses (a web page's
	// cross-origin write; on loopback, a Host not this machine's: DNS
	// rebinding would let a page read the calls) before anything else.
	Browser *browserguard.Guard
}

// AdminHandlerOptions is the admin API with o.
func (g *Gateway) AdminHandlerOptions(log *calllog.Log, o AdminOptions) http.Handler {
	mux := http.NewServeMux()
	h := g.adminRoutes(mux, log, o)
	if o.Authorize != nil {
		h = authorized(h, o.Authorize)
	}
	if o.Browser == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := o.Browser.Check(r); err != nil {
			writeError(w, http.StatusForbidden, "permission_denied", err.Error())
			return
		}
		h.ServeHTTP(w, r)
	})
}

// authorized serves h the requests authorize lets through.
func authorized(h http.Handler, authorize AdminAuthorizer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		a := AdminAccess{}
		if r.URL.Path == "/v1/rbac:dry-run" {
			a = AdminAccess{Calls: true, Namespace: "*"} // it reads every service's calls
		}
		if strings.HasPrefix(r.URL.Path, "/v1/calls") {
			a = AdminAccess{Calls: true, Namespace: "*"}
			if svc := r.URL.Query().Get("service"); svc != "" {
				if ns, _, ok := strings.Cut(svc, "/"); ok {
					a.Namespace = ns
				} else {
					a.Namespace = "default"
				}
			}
		}
		if status, err := authorize(r, a); err != nil {
			code := "permission_denied"
			if status == http.StatusUnauthorized {
				code = "unauthenticated"
			}
			writeError(w, status, code, err.Error())
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (g *Gateway) adminRoutes(mux *http.ServeMux, log *calllog.Log, o AdminOptions) http.Handler {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if g.table.Load() == nil {
			writeError(w, http.StatusServiceUnavailable, "unavailable", "no configuration applied yet")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	g.registerFuncs(log)
	prom := promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		g.refreshGauges(log)
		prom.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /v1/config", g.serveConfig)
	mux.HandleFunc("GET /v1/clusters", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"clusters": g.clustersHealth()})
	})
	if log != nil {
		mux.HandleFunc("GET /v1/calls", func(w http.ResponseWriter, r *http.Request) { serveCalls(w, r, log) })
		mux.HandleFunc("GET /v1/calls/stats", func(w http.ResponseWriter, r *http.Request) { serveStats(w, r, log) })
		mux.HandleFunc("GET /v1/calls/endpoints", func(w http.ResponseWriter, r *http.Request) { serveEndpoints(w, r, log) })
		mux.HandleFunc("GET /v1/calls/graph", func(w http.ResponseWriter, r *http.Request) { serveGraph(w, r, log) })
		mux.HandleFunc("GET /v1/calls/services", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, map[string]any{"services": log.Services()})
		})
		mux.HandleFunc("POST /v1/rbac:dry-run", func(w http.ResponseWriter, r *http.Request) { g.serveDryRun(w, r, log) })
	}
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return readableBy(mux, o.Origins)
}

// readableBy lets pages of origins (the web console, served by a registry
// server of another origin) read the admin API's GET answers (CORS), and
// no other page: "*" would let any site a user visits read the calls
// through the user's browser from wherever the admin is reachable.
// Profiles stay same-origin.
func readableBy(h http.Handler, origins []string) http.Handler {
	if len(origins) == 0 {
		return h
	}
	ok := map[string]bool{}
	for _, o := range origins {
		ok[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !strings.HasPrefix(r.URL.Path, "/debug/") {
			w.Header().Add("Vary", "Origin")
			if o := r.Header.Get("Origin"); o != "" && ok[strings.ToLower(o)] {
				w.Header().Set("Access-Control-Allow-Origin", o)
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (g *Gateway) refreshGauges(log *calllog.Log) {
	g.mu.Lock()
	f := g.xds
	g.mu.Unlock()
	if f != nil {
		st := f()
		g.metrics.config.Reset()
		for t, v := range st.Versions {
			g.metrics.config.WithLabelValues(shortName(t), v).Set(1)
		}
	}
}

// registerFuncs exposes counters kept elsewhere (the xDS client, the call
// log) as Prometheus counters read at scrape time.
func (g *Gateway) registerFuncs(log *calllog.Log) {
	xds := func(f func(st xdsclient.Status) int64) func() float64 {
		return func() float64 {
			g.mu.Lock()
			s := g.xds
			g.mu.Unlock()
			if s == nil {
				return 0
			}
			return float64(f(s()))
		}
	}
	cs := []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sextant_gateway_xds_acks_total", Help: "xDS responses accepted."},
			xds(func(st xdsclient.Status) int64 { return st.ACKs })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sextant_gateway_xds_nacks_total", Help: "xDS responses refused (NACK)."},
			xds(func(st xdsclient.Status) int64 { return st.NACKs })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sextant_gateway_xds_reconnects_total", Help: "Reconnections to the control plane."},
			xds(func(st xdsclient.Status) int64 { return st.Reconnects })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sextant_gateway_mirror_sent_total", Help: "Mirrored copies answered by their endpoint (any status)."},
			func() float64 { return float64(g.mirrors.sent.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sextant_gateway_mirror_failed_total", Help: "Mirrored copies sent that got no answer: connection refused or broken, timeout."},
			func() float64 { return float64(g.mirrors.failed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sextant_gateway_mirror_dropped_total", Help: "Mirrored copies not sent: too many in flight, a streamed body, no endpoint, shutting down."},
			func() float64 { return float64(g.mirrors.dropped.Load()) }),
	}
	if log != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sextant_gateway_call_records_written_total", Help: "Call records written to the call log."},
				func() float64 { w, _ := log.Counts(); return float64(w) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sextant_gateway_call_records_dropped_total", Help: "Call records dropped because the recorder's queue was full."},
				func() float64 { _, d := log.Counts(); return float64(d) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sextant_gateway_call_log_bytes", Help: "Size of the call log on disk."},
				func() float64 { return float64(log.Bytes()) }))
	}
	cs = append(cs, ejectionCollector{g}, healthCollector{g})
	for _, c := range cs {
		_ = g.metrics.reg.Register(c) // a second AdminHandler keeps the first's
	}
}

func shortName(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '.' {
			return url[i+1:]
		}
	}
	return url
}

func (g *Gateway) serveConfig(w http.ResponseWriter, _ *http.Request) {
	g.mu.Lock()
	a := g.applied
	f := g.xds
	g.mu.Unlock()
	out := map[string]any{"listener": a.Listener, "route_config": a.Routes}
	if a.Mesh != "" {
		out["mesh_route_config"] = a.Mesh // served beside route_config on the listener's port
	}
	if !a.At.IsZero() {
		out["applied_at"] = a.At.UTC()
	}
	if f != nil {
		st := f()
		out["xds"] = map[string]any{"connected": st.Connected, "versions": st.Versions, "acks": st.ACKs,
			"nacks": st.NACKs, "last_nack": st.LastNACK, "last_nack_type": st.LastNACKType, "reconnects": st.Reconnects}
	}
	res := map[string][]json.RawMessage{}
	for url, list := range a.Resources {
		for _, r := range list {
			m, ok := r.(proto.Message)
			if !ok || m == nil {
				continue
			}
			b, err := protojson.Marshal(m)
			if err != nil {
				continue
			}
			res[shortName(url)] = append(res[shortName(url)], b)
		}
	}
	out["resources"] = res
	out["tls"] = g.tlsStatus(time.Now())
	out["tcp"] = g.tcpStatus()
	writeJSON(w, out)
}

func serveCalls(w http.ResponseWriter, r *http.Request, log *calllog.Log) {
	// Flushed first: the service is resolved against the partitions.
	if !flushed(w, log) {
		return
	}
	p := params{q: r.URL.Query()}
	cq := calllog.Query{Service: p.service(log), Endpoint: p.q.Get("endpoint"),
		From: p.time("from"), To: p.time("to"), MinLatency: p.latency("min_latency"),
		MaxLatency: p.latency("max_latency"), Limit: p.int("limit"), Reason: p.q.Get("reason")}
	if !p.ok(w) {
		return
	}
	calls, truncated, err := log.Calls(cq)
	if err != nil {
		writeQueryError(w, err)
		return
	}
	if calls == nil {
		calls = []calllog.Call{}
	}
	writeJSON(w, map[string]any{"service": cq.Service, "calls": calls, "truncated": truncated})
}

// statsQuery reads a stats query's parameters: the window defaults to the
// last hour. Call it once the log is flushed (see serveCalls).
func statsQuery(p *params, log *calllog.Log) calllog.StatsQuery {
	sq := calllog.StatsQuery{Service: p.service(log), Endpoint: p.q.Get("endpoint"),
		From: p.time("from"), To: p.time("to"), Step: p.duration("step")}
	if sq.To.IsZero() {
		sq.To = time.Now()
	}
	if sq.From.IsZero() {
		sq.From = sq.To.Add(-time.Hour)
	}
	return sq
}

// statsRequest flushes the log and reads a stats query, or answers the
// error itself and reports false.
func statsRequest(w http.ResponseWriter, r *http.Request, log *calllog.Log) (calllog.StatsQuery, bool) {
	if !flushed(w, log) {
		return calllog.StatsQuery{}, false
	}
	p := params{q: r.URL.Query()}
	sq := statsQuery(&p, log)
	return sq, p.ok(w)
}

func serveStats(w http.ResponseWriter, r *http.Request, log *calllog.Log) {
	sq, ok := statsRequest(w, r, log)
	if !ok {
		return
	}
	steps, err := log.Stats(sq)
	if err != nil {
		writeQueryError(w, err)
		return
	}
	var total, errs int64
	for _, s := range steps {
		total += s.Count
		errs += s.Errors
	}
	writeJSON(w, map[string]any{"service": sq.Service, "from": sq.From.UTC(), "to": sq.To.UTC(),
		"step_ms": sq.Step.Milliseconds(), "count": total, "errors": errs, "steps": steps})
}

// serveEndpoints answers per-endpoint counts, errors and latency of a
// service over a window: a dead endpoint among live ones shows here.
func serveEndpoints(w http.ResponseWriter, r *http.Request, log *calllog.Log) {
	sq, ok := statsRequest(w, r, log)
	if !ok {
		return
	}
	eps, err := log.Endpoints(sq)
	if err != nil {
		writeQueryError(w, err)
		return
	}
	if eps == nil {
		eps = []calllog.EndpointStats{}
	}
	writeJSON(w, map[string]any{"service": sq.Service, "from": sq.From.UTC(), "to": sq.To.UTC(), "endpoints": eps})
}

// params reads query parameters, keeping the first error.
type params struct {
	q   url.Values
	err error
}

func (p *params) keep(err error) {
	if p.err == nil {
		p.err = err
	}
}

// service reads the service parameter: "namespace/name", or a bare name
// in namespace default (client.ParseService, as the CLI reads it), so that
// "orders" finds the calls filed under "default/orders". A call-log
// partition of exactly the given name (a cluster of another control plane,
// filed under its name) is taken as it is: call it after flushed, so that
// the partitions of calls recorded so far exist.
func (p *params) service(log *calllog.Log) string {
	v := p.q.Get("service")
	if v == "" || slices.Contains(log.Services(), v) {
		return v
	}
	ns, name, err := client.ParseService(v, "")
	if err != nil {
		p.keep(fmt.Errorf("service: %q: want NAME (in namespace default) or NAMESPACE/NAME", v))
		return v
	}
	return ns + "/" + name
}

func (p *params) time(name string) time.Time {
	t, err := parseTime(p.q.Get(name), name)
	p.keep(err)
	return t
}

func (p *params) latency(name string) time.Duration {
	d, err := parseLatency(p.q.Get(name), name)
	p.keep(err)
	return d
}

func (p *params) duration(name string) time.Duration {
	v := p.q.Get(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		p.keep(fmt.Errorf("%s: %q is not a positive duration (e.g. 10s)", name, v))
	}
	return d
}

func (p *params) int(name string) int {
	v := p.q.Get(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		p.keep(fmt.Errorf("%s: %q is not an integer", name, v))
	}
	return n
}

// ok answers 400 naming the first bad parameter, if any.
func (p *params) ok(w http.ResponseWriter) bool {
	if p.err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", p.err.Error())
		return false
	}
	return true
}

// flushed makes every call recorded so far visible to the query.
func flushed(w http.ResponseWriter, log *calllog.Log) bool {
	if err := log.Flush(); err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return false
	}
	return true
}

// parseTime reads RFC 3339 or unix milliseconds; "" is the zero time.
func parseTime(s, field string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if ms, merr := strconv.ParseInt(s, 10, 64); merr == nil {
		t, err = time.UnixMilli(ms), nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is neither RFC 3339 nor unix milliseconds", field, s)
	}
	// Answers carry times as JSON, which holds years 0..9999 only.
	if y := t.Year(); y < 0 || y > 9999 {
		return time.Time{}, fmt.Errorf("%s: %q is outside the years 0..9999", field, s)
	}
	return t, nil
}

// parseLatency reads a Go duration ("5ms") or integer microseconds.
func parseLatency(s, field string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if us, err := strconv.ParseInt(s, 10, 64); err == nil && us >= 0 {
		return time.Duration(us) * time.Microsecond, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s: %q is not a duration (e.g. 5ms) or microseconds", field, s)
	}
	return d, nil
}

func writeQueryError(w http.ResponseWriter, err error) {
	if errors.Is(err, calllog.ErrBadQuery) {
		writeError(w, http.StatusBadRequest, "invalid_argument", err.Error())
		return
	}
	writeError(w, http.StatusInternalServerError, "internal", err.Error())
}

func writeJSON(w http.ResponseWriter, v any) {
	// Encoded before the status is sent, so that a value JSON cannot hold
	// answers 500 rather than a 200 with an empty body.
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "encode the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": "gateway: " + msg}})
}
