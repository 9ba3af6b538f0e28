package gateway

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// table is one immutable version of the routing config, swapped atomically;
// calls in flight keep the version they started with.
type table struct {
	exact    map[string]*vhostRT
	suffixes []wildcard // "*.example.com": longest suffix first
	prefixes []wildcard // "api.*": longest prefix first
	any      *vhostRT
	clusters map[string]*clusterRT
	// unsupported: clusters accepted from CDS that calls cannot use, and why.
	unsupported map[string]string
	// upgrades are the listener's upgrade types (listenerSpec.upgrades).
	upgrades map[string]bool
	// streamIdle is the HTTP connection manager's stream_idle_timeout
	// (0: none).
	streamIdle time.Duration
	// rbac are the listener's RBAC filters (rbac.go), run on every call.
	rbac []*rbacFilter
	// port is the listener's port (0: none yet), for dry runs (dryrun.go).
	port uint32
	// tracing and logs are the calls' tracing (nil: off) and access logs:
	// the gateway's, with the listener's Telemetry over them (telemetry.go).
	tracing *Tracing
	logs    []accessLogSpec
}

// setTelemetry sets the table's tracing and access logs from the
// gateway's options and the listener's lt (nil: none).
func (t *table) setTelemetry(g *Gateway, lt *listenerTelemetry) {
	t.tracing = effectiveTracing(g.opts.Tracing, lt)
	t.logs = effectiveLogs(g.opts.AccessLog, lt)
}

type wildcard struct {
	s  string
	vh *vhostRT
}

type vhostRT struct {
	name    string
	routes  []*routeRT
	dropped string // vhostSpec.dropped
}

// routeRT is a route with its clusters resolved.
type routeRT struct {
	spec    *routeSpec
	name    string
	targets []target
	total   uint32
	mirrors []mirrorRT // the route's mirrors (filter_mirror.go)
}

// target is one (weighted) destination of a route.
type target struct {
	name    string
	cluster *clusterRT // nil: the cluster is not (yet) known
	weight  uint32
	md      map[string]string
	mdKey   string // md as "k=v,k=v" (sorted), for call records
}

func newTable(rc *routeConfigSpec, clusters map[string]*clusterRT) *table {
	t := &table{exact: map[string]*vhostRT{}, clusters: clusters}
	if rc == nil {
		return t
	}
	for _, v := range rc.vhosts {
		vh := &vhostRT{name: v.name, dropped: v.dropped}
		for _, r := range v.routes {
			rt := &routeRT{spec: r, name: r.name}
			for _, cw := range r.clusters {
				rt.targets = append(rt.targets, target{name: cw.name, cluster: clusters[cw.name],
					weight: cw.weight, md: cw.md, mdKey: mdKey(cw.md)})
				rt.total += cw.weight
			}
			for _, m := range r.mirrors {
				rt.mirrors = append(rt.mirrors, mirrorRT{spec: m, cluster: clusters[m.cluster]})
			}
			vh.routes = append(vh.routes, rt)
		}
		// The first virtual host to claim a domain keeps it (Envoy refuses
		// duplicates; a config that repeats one still serves).
		for _, d := range v.domains {
			switch {
			case d == "*":
				if t.any == nil {
					t.any = vh
				}
			case strings.HasPrefix(d, "*"):
				t.suffixes = append(t.suffixes, wildcard{d[1:], vh})
			case strings.HasSuffix(d, "*"):
				t.prefixes = append(t.prefixes, wildcard{d[:len(d)-1], vh})
			default:
				if _, ok := t.exact[d]; !ok {
					t.exact[d] = vh
				}
			}
		}
	}
	sort.SliceStable(t.suffixes, func(i, j int) bool { return len(t.suffixes[i].s) > len(t.suffixes[j].s) })
	sort.SliceStable(t.prefixes, func(i, j int) bool { return len(t.prefixes[i].s) > len(t.prefixes[j].s) })
	return t
}

func mdKey(md map[string]string) string {
	if len(md) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(md))
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(md[k])
	}
	return b.String()
}

// vhost finds the virtual host of a Host header, as Envoy orders them:
// exact, then longest suffix wildcard, then longest prefix wildcard, then *.
// host is lowercased in place by the caller's copy.
func (t *table) vhost(host []byte) *vhostRT {
	if i := bytes.LastIndexByte(host, ':'); i >= 0 && !bytes.Contains(host[i:], []byte("]")) {
		host = host[:i]
	}
	if vh, ok := t.exact[string(host)]; ok { // no allocation: map index by string(bytes)
		return vh
	}
	for _, w := range t.suffixes {
		if len(host) > len(w.s) && string(host[len(host)-len(w.s):]) == w.s {
			return w.vh
		}
	}
	for _, w := range t.prefixes {
		if len(host) > len(w.s) && string(host[:len(w.s)]) == w.s {
			return w.vh
		}
	}
	return t.any
}

// route returns the first route of vh matching the request.
// tls says whether the request came over TLS (its :scheme is https).
func (vh *vhostRT) route(path []byte, h *fasthttp.RequestHeader, tls bool) *routeRT {
	for _, r := range vh.routes {
		if r.spec.match.matches(path, h, tls) {
			return r
		}
	}
	return nil
}

func (m *matchSpec) matches(path []byte, h *fasthttp.RequestHeader, tls bool) bool {
	if !m.matchesPath(path) {
		return false
	}
	for i := range m.headers {
		if !m.headers[i].matches(h, tls) {
			return false
		}
	}
	if len(m.query) > 0 {
		return m.matchQuery(h.RequestURI())
	}
	return true
}

// matchesPath is the path part of matches.
func (m *matchSpec) matchesPath(path []byte) bool {
	switch m.kind {
	case matchPrefix:
		if len(path) < len(m.value) {
			return false
		}
		p := path[:len(m.value)]
		if m.ignoreCase {
			if !bytes.EqualFold(p, []byte(m.value)) {
				return false
			}
		} else if string(p) != m.value {
			return false
		}
	case matchPath:
		if m.ignoreCase {
			if !bytes.EqualFold(path, []byte(m.value)) {
				return false
			}
		} else if string(path) != m.value {
			return false
		}
	case matchRegex:
		if !m.re.Match(path) {
			return false
		}
	}
	return true
}

// matchQuery matches the query_parameters against the request's query
// string (the cold path: only routes with query matchers parse it).
func (m *matchSpec) matchQuery(uri []byte) bool {
	var args fasthttp.Args
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		args.ParseBytes(uri[i+1:])
	}
	for i := range m.query {
		q := &m.query[i]
		v := args.Peek(q.name)
		present := args.Has(q.name)
		var ok bool
		if q.kind == strPresent {
			ok = present
		} else {
			if !present {
				return false
			}
			ok = matchString(q, v)
		}
		if ok == q.invert {
			return false
		}
	}
	return true
}

func (hm *headerMatch) matches(h *fasthttp.RequestHeader, tls bool) bool {
	var v []byte
	switch hm.pseudo {
	case notPseudo:
		v = h.Peek(hm.name)
	case pseudoMethod:
		v = h.Method()
	case pseudoAuthority:
		v = h.Host()
	case pseudoPath:
		v = h.RequestURI()
	case pseudoScheme:
		v = schemeHTTP
		if tls {
			v = schemeHTTPS
		}
	}
	present := v != nil
	var ok bool
	switch hm.kind {
	case strPresent:
		ok = present
	default:
		if !present {
			return false // Envoy: an absent header never matches, inverted or not
		}
		ok = matchString(hm, v)
	}
	return ok != hm.invert
}

func matchString(hm *headerMatch, v []byte) bool {
	if hm.kind == strRegex {
		return hm.re.Match(v)
	}
	w := hm.value // lowercased at decode when ignoreCase
	if hm.ignoreCase {
		switch hm.kind {
		case strExact:
			return bytes.EqualFold(v, []byte(w))
		case strPrefix:
			return len(v) >= len(w) && bytes.EqualFold(v[:len(w)], []byte(w))
		case strSuffix:
			return len(v) >= len(w) && bytes.EqualFold(v[len(v)-len(w):], []byte(w))
		case strContains:
			return bytes.Contains(bytes.ToLower(v), []byte(w))
		}
		return false
	}
	switch hm.kind {
	case strExact:
		return string(v) == w
	case strPrefix:
		return bytes.HasPrefix(v, []byte(w))
	case strSuffix:
		return bytes.HasSuffix(v, []byte(w))
	case strContains:
		return bytes.Contains(v, []byte(w))
	}
	return false
}

// pick chooses a weighted target.
func (r *routeRT) pick() *target { return &r.targets[r.pickIndex()] }

// pickIndex chooses a weighted target, by its index.
func (r *routeRT) pickIndex() int {
	if len(r.targets) == 1 {
		return 0
	}
	n := rand.Uint32N(r.total)
	for i := range r.targets {
		if n < r.targets[i].weight {
			return i
		}
		n -= r.targets[i].weight
	}
	return len(r.targets) - 1
}
