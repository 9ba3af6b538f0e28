package gateway

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/calllog"
)

// Dry run (POST /v1/rbac:dry-run, docs/api.md): which calls of the call
// log candidate RBAC filters would start denying. Each recorded call of the
// range is rebuilt as a request (rbacReq with a replay) and run through the
// listener's current filters and the candidate ones with the same engine
// the data path runs (rbacEngine.evaluate). What a rule reads that the
// record does not keep (another header, a path not kept, the destination
// IP, SNI) is never guessed: the call counts as undetermined, by attribute.
// Only calls through this gateway are recorded: proxyless gRPC calls are
// not in it.

// Bounds of a dry run.
const (
	maxDryRunBody     = 4 << 20
	defaultDryRunMax  = 100000
	defaultDryRunTime = 10 * time.Second
	maxDryRunTime     = time.Minute
	defaultSamples    = 20
	maxSamples        = 1000
	// maxDryRunGroups bounds the denied groups listed (paths are
	// high-cardinality); the counts cover every call.
	maxDryRunGroups = 1000
)

// DryRunNote is said in every answer: what the dry run cannot see.
const DryRunNote = "gateway calls only: proxyless gRPC calls are not recorded"

// dryRunRequest is the body of POST /v1/rbac:dry-run.
type dryRunRequest struct {
	// Listeners are the candidate RBAC filters per listener port: they
	// replace the port's current ones; ports not listed are not
	// evaluated.
	Listeners []dryRunListener `json:"listeners"`
	// From and To bound the calls' start (RFC 3339 or unix milliseconds);
	// default: the hour before To, To now.
	From string `json:"from"`
	To   string `json:"to"`
	// MaxCalls bounds the calls read (default and at most 100000).
	MaxCalls int `json:"max_calls"`
	// Timeout bounds the scan (a Go duration, default 10s, at most 1m).
	Timeout string `json:"timeout"`
	// Samples is how many newly denied calls to list (default 20, at most
	// 1000).
	Samples *int `json:"samples"`
}

type dryRunListener struct {
	Port uint32 `json:"port"`
	// HTTPFilters are HttpFilter messages (protojson) as an HTTP
	// connection manager lists them; the RBAC ones are the candidate,
	// others are ignored as the data path ignores them.
	HTTPFilters []json.RawMessage `json:"http_filters"`
	// RouteOverrides replace, per route name, the route's current
	// typed_per_filter_config entries of RBAC filters (filter name ->
	// an Any: RBACPerRoute or FilterConfig). Routes not listed keep their
	// current overrides.
	RouteOverrides map[string]map[string]json.RawMessage `json:"route_overrides"`
}

// dryRun is a decoded, compiled request.
type dryRun struct {
	from, to time.Time
	maxCalls int
	timeout  time.Duration
	samples  int
	ports    map[uint32]*candidate
}

type candidate struct {
	filters []*rbacFilter
	routes  map[string]map[string]rbacOverride
}

// decodeDryRun reads and compiles a dry run request; an error names the
// field. now is the default end of the range.
func decodeDryRun(body []byte, now time.Time) (*dryRun, error) {
	var req dryRunRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	if dec.More() {
		return nil, errors.New("body: more than one JSON value")
	}
	d := &dryRun{maxCalls: defaultDryRunMax, timeout: defaultDryRunTime, samples: defaultSamples, ports: map[uint32]*candidate{}}
	var err error
	if d.to, err = parseTime(req.To, "to"); err != nil {
		return nil, err
	}
	if d.from, err = parseTime(req.From, "from"); err != nil {
		return nil, err
	}
	if d.to.IsZero() {
		d.to = now
	}
	if d.from.IsZero() {
		d.from = d.to.Add(-time.Hour)
	}
	if d.to.Before(d.from) {
		return nil, errors.New("to: before from")
	}
	switch {
	case req.MaxCalls < 0 || req.MaxCalls > defaultDryRunMax:
		return nil, fmt.Errorf("max_calls: %d not in [1, %d]", req.MaxCalls, defaultDryRunMax)
	case req.MaxCalls > 0:
		d.maxCalls = req.MaxCalls
	}
	if req.Timeout != "" {
		t, err := time.ParseDuration(req.Timeout)
		if err != nil || t <= 0 || t > maxDryRunTime {
			return nil, fmt.Errorf("timeout: %q: want a duration in (0, %v]", req.Timeout, maxDryRunTime)
		}
		d.timeout = t
	}
	if req.Samples != nil {
		if *req.Samples < 0 || *req.Samples > maxSamples {
			return nil, fmt.Errorf("samples: %d not in [0, %d]", *req.Samples, maxSamples)
		}
		d.samples = *req.Samples
	}
	if len(req.Listeners) == 0 {
		return nil, errors.New("listeners: required (the candidate filters of at least one port)")
	}
	for i, l := range req.Listeners {
		p := fmt.Sprintf("listeners[%d]", i)
		if l.Port == 0 || l.Port > 65535 {
			return nil, fmt.Errorf("%s.port: %d not in [1, 65535]", p, l.Port)
		}
		if d.ports[l.Port] != nil {
			return nil, fmt.Errorf("%s.port: %d listed twice", p, l.Port)
		}
		fs := make([]*hcm.HttpFilter, len(l.HTTPFilters))
		for j, raw := range l.HTTPFilters {
			fs[j] = new(hcm.HttpFilter)
			if err := protojson.Unmarshal(raw, fs[j]); err != nil {
				return nil, fmt.Errorf("%s.http_filters[%d]: %w", p, j, err)
			}
		}
		c := &candidate{}
		if c.filters, err = decodeHTTPFilters(fs, p); err != nil {
			return nil, err
		}
		for route, ov := range l.RouteOverrides {
			rp := fmt.Sprintf("%s.route_overrides[%q]", p, route)
			m := make(map[string]*anypb.Any, len(ov))
			for name, raw := range ov {
				a := new(anypb.Any)
				if err := protojson.Unmarshal(raw, a); err != nil {
					return nil, fmt.Errorf("%s[%q]: %w", rp, name, err)
				}
				m[name] = a
			}
			o, err := decodeRBACOverrides(m, rp)
			if err != nil {
				return nil, err
			}
			if c.routes == nil {
				c.routes = map[string]map[string]rbacOverride{}
			}
			c.routes[route] = o
		}
		d.ports[l.Port] = c
	}
	return d, nil
}

// The answer of POST /v1/rbac:dry-run is the SDK's, which the server and
// the CLI read: one definition of the wire form.
type (
	DryRunResult = client.DryRunResult
	DryRunGroup  = client.DryRunGroup
	DryRunCall   = client.DryRunCall
)

// notKeptValue shows a field the call log had no room for.
const notKeptValue = "(not kept)"

// replay is a call record rebuilt as a request: the matchers that read
// what it does not keep call miss.
type replay struct {
	c                                *calllog.Call
	methodNotKept, pathNotKept       bool
	hostNotKept                      bool
	principalNotKept, subjectNotKept bool
	peerNotKept                      bool
	unknown                          string // the first attribute missed
}

// miss notes that the rule read attr, which the record does not keep; the
// match is then not used (the call is undetermined).
func (p *replay) miss(attr string) bool {
	if p.unknown == "" {
		p.unknown = attr
	}
	return false
}

// header reports whether the record keeps what m reads.
func (p *replay) header(m *matchHeader) bool {
	switch m.pseudo {
	case "":
		return p.miss("header " + m.hm.name)
	case ":method":
		if p.methodNotKept || p.c.Method == "" {
			return p.miss("method (not kept)")
		}
	case ":path":
		return p.miss(":path (the query is not kept)")
	case ":authority":
		if p.hostNotKept {
			return p.miss("host (not kept)")
		}
	}
	return true
}

// principal is matchPrincipal on the record: the first URI SAN and the
// subject are kept; whether the certificate has other names is too.
func (p *replay) principal(m *matchPrincipal) bool {
	c := p.c
	switch {
	case !c.PeerCert:
		return false
	case m.any:
		return true
	case p.principalNotKept:
		return p.miss("principal (not kept)")
	case c.Principal != "" && matchStr(&m.sm, c.Principal):
		return true
	case p.subjectNotKept:
		return p.miss("principal (certificate subject not kept)")
	case matchStr(&m.sm, c.Subject):
		return true
	case c.OtherNames:
		return p.miss("principal (certificate names after the first URI SAN are not kept)")
	}
	return false
}

// replayOf rebuilds c as a request in h.
func replayOf(c *calllog.Call, h *fasthttp.RequestHeader, rp *replay) rbacReq {
	*rp = replay{c: c}
	for _, f := range c.NotKept {
		switch f {
		case "method":
			rp.methodNotKept = true
		case "path":
			rp.pathNotKept = true
		case "host":
			rp.hostNotKept = true
		case "principal":
			rp.principalNotKept = true
		case "subject":
			rp.subjectNotKept = true
		case "peer_ip":
			rp.peerNotKept = true
		}
	}
	h.Reset()
	h.SetMethod(c.Method)
	h.SetRequestURI(c.Path)
	h.SetHost(c.Host)
	r := rbacReq{h: h, path: []byte(c.Path), scheme: schemeHTTP, rp: rp,
		local: netip.AddrPortFrom(netip.Addr{}, uint16(c.Port))}
	if c.TLS {
		r.scheme = schemeHTTPS
	}
	r.peer, _ = netip.ParseAddr(c.PeerIP)
	return r
}

// decide runs filters, with a route's overrides ov, over r as rbacCheck
// does, without counting: whether the call is allowed, else what denied it.
func decide(filters []*rbacFilter, ov map[string]rbacOverride, r *rbacReq) (bool, string) {
	for _, f := range filters {
		if f = effective(f, ov); f == nil || f.rules == nil || f.rules.action == rbacLog {
			continue
		}
		if allowed, p := f.rules.evaluate(r); !allowed {
			return false, denial(f, p)
		}
	}
	return true, ""
}

// routesByName indexes a table's routes by name, first virtual host (by
// name) first, for the overrides of a recorded route. A name several
// routes share when any of them has RBAC overrides maps to ambiguousRoute:
// the record does not say which one the call took.
func routesByName(t *table) map[string]*routeRT {
	out := map[string]*routeRT{}
	if t == nil {
		return out
	}
	var vhs []*vhostRT
	for _, v := range t.exact {
		vhs = append(vhs, v)
	}
	for _, w := range t.suffixes {
		vhs = append(vhs, w.vh)
	}
	for _, w := range t.prefixes {
		vhs = append(vhs, w.vh)
	}
	if t.any != nil {
		vhs = append(vhs, t.any)
	}
	slices.SortStableFunc(vhs, func(a, b *vhostRT) int { return strings.Compare(a.name, b.name) })
	for _, v := range vhs {
		for _, r := range v.routes {
			prev, ok := out[r.name]
			switch {
			case !ok:
				out[r.name] = r
			case prev != r && (len(prev.spec.rbac) > 0 || len(r.spec.rbac) > 0):
				out[r.name] = ambiguousRoute
			}
		}
	}
	return out
}

// ambiguousRoute stands for routes of one name with RBAC overrides.
var ambiguousRoute = &routeRT{spec: &routeSpec{}}

// replayRoute finds the route a recorded call took when several share its
// name (routes are often unnamed): in its host's virtual host, the first
// route whose match the call's path meets. It misses, and returns nil,
// when that takes what the record does not keep (a path not kept, a
// route's header or query matchers) or finds a route of another name (the
// config changed since).
func replayRoute(t *table, c *calllog.Call, rp *replay) *routeRT {
	if rp.pathNotKept {
		rp.miss("path (not kept), to tell same-named routes apart")
		return nil
	}
	vh := t.vhost([]byte(strings.ToLower(c.Host)))
	if vh == nil {
		rp.miss("route (the call's host has no virtual host now)")
		return nil
	}
	for _, r := range vh.routes {
		m := &r.spec.match
		if !m.matchesPath([]byte(c.Path)) {
			continue
		}
		if len(m.headers) > 0 || len(m.query) > 0 {
			rp.miss("route (a route matches on headers or the query)")
			return nil
		}
		if r.name != c.Route {
			rp.miss("route (the call's path now takes another route)")
			return nil
		}
		return r
	}
	rp.miss("route (no route takes the call's path now)")
	return nil
}

// dryRun evaluates d over the calls of log.
func (g *Gateway) dryRun(log *calllog.Log, d *dryRun) DryRunResult {
	res := DryRunResult{From: d.from.UTC(), To: d.to.UTC(), UndeterminedBy: map[string]int{}, Denied: []DryRunGroup{},
		Samples: []DryRunCall{}, Note: DryRunNote}
	deadline := time.Now().Add(d.timeout)
	plain := g.table.Load()
	var tlsSt tlsState
	if p := g.tls.Load(); p != nil {
		tlsSt = *p
	}
	routes := map[*table]map[string]*routeRT{}
	groups := map[DryRunGroup]int{}
	var h fasthttp.RequestHeader
	var rp replay
	cut := func(by string) {
		res.Truncated, res.TruncatedBy = true, by
	}
services:
	for _, svc := range log.Services() {
		if time.Now().After(deadline) {
			cut("timeout")
			break
		}
		left := d.maxCalls - res.Scanned
		if left <= 0 {
			cut("max_calls")
			break
		}
		calls, truncated, err := log.Calls(calllog.Query{Service: svc, From: d.from, To: d.to, Limit: left})
		if err != nil {
			res.Errors = append(res.Errors, err.Error()) // that service's calls are not in the counts
			continue
		}
		for i := range calls {
			if i%256 == 255 && time.Now().After(deadline) {
				cut("timeout")
				break services
			}
			c := &calls[i]
			res.Scanned++
			if c.Layout < 2 {
				res.Undetermined++
				res.UndeterminedBy["record layout v1 (no port, principal, method, path or host)"]++
				continue
			}
			var tb *table
			var cand *candidate
			if l := tlsSt[uint32(c.Port)]; l != nil {
				host, _, _ := strings.Cut(c.Host, ":")
				if ch := l.match(host); ch != nil {
					tb = ch.table
				}
				cand = d.ports[uint32(c.Port)]
			} else {
				tb = plain
				if tb != nil && tb.port != 0 {
					// The plaintext listener may be served on another port
					// than its own (--listen): its calls are its port's.
					cand = d.ports[tb.port]
				}
				if cand == nil {
					cand = d.ports[uint32(c.Port)]
				}
			}
			if cand == nil {
				res.OtherPorts++
				continue
			}
			res.Evaluated++
			req := replayOf(c, &h, &rp)
			var cur []*rbacFilter
			var curOv map[string]rbacOverride
			if tb != nil {
				cur = tb.rbac
				byName := routes[tb]
				if byName == nil {
					byName = routesByName(tb)
					routes[tb] = byName
				}
				r := byName[c.Route]
				if r == ambiguousRoute {
					r = replayRoute(tb, c, &rp)
				}
				if r != nil {
					curOv = r.spec.rbac
				}
			}
			candOv := curOv
			if o, ok := cand.routes[c.Route]; ok {
				candOv = o
			}
			wasOK, _ := decide(cur, curOv, &req)
			nowOK, policy := decide(cand.filters, candOv, &req)
			if rp.unknown != "" {
				res.Undetermined++
				res.UndeterminedBy[rp.unknown]++
				continue
			}
			switch {
			case wasOK == nowOK:
				res.Unchanged++
			case nowOK:
				res.NewlyAllowed++
			default:
				res.NewlyDenied++
				shown := func(v, field string) string {
					if slices.Contains(c.NotKept, field) {
						return notKeptValue
					}
					return v
				}
				k := DryRunGroup{Port: c.Port, Service: c.Service, Route: c.Route, Principal: shown(c.Principal, "principal"),
					Method: shown(c.Method, "method"), Path: shown(c.Path, "path"), Policy: policy}
				if _, ok := groups[k]; ok || len(groups) < maxDryRunGroups {
					groups[k]++
				} else {
					res.GroupsTruncated = true
				}
				if len(res.Samples) < d.samples {
					res.Samples = append(res.Samples, DryRunCall{Start: c.Start, Port: c.Port, Service: c.Service, Route: c.Route,
						Principal: k.Principal, Method: k.Method, Path: k.Path, Host: shown(c.Host, "host"), PeerIP: c.PeerIP, Policy: policy})
				}
			}
		}
		if truncated {
			cut("max_calls")
			break
		}
	}
	for k, n := range groups {
		k.Count = n
		res.Denied = append(res.Denied, k)
	}
	slices.SortFunc(res.Denied, func(a, b DryRunGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Service, b.Service), cmp.Compare(a.Route, b.Route),
			cmp.Compare(a.Principal, b.Principal), cmp.Compare(a.Method, b.Method), cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Port, b.Port))
	})
	return res
}

// serveDryRun answers POST /v1/rbac:dry-run.
func (g *Gateway) serveDryRun(w http.ResponseWriter, r *http.Request, log *calllog.Log) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxDryRunBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", "body: "+err.Error())
		return
	}
	if len(body) > maxDryRunBody {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_argument", fmt.Sprintf("body: larger than %d bytes", maxDryRunBody))
		return
	}
	d, err := decodeDryRun(body, time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", err.Error())
		return
	}
	if !flushed(w, log) {
		return
	}
	writeJSON(w, g.dryRun(log, d))
}
