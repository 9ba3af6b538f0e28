package gateway

import (
	"cmp"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// The service graph (GET /v1/calls/graph): who called whom through the
// gateway over a window, read from the call log. A caller is known by its
// client certificate's SPIFFE ID (spiffe://TD/ns/NS/sa/SA), named NS/SA,
// so that a service calling through the gateway with the identity of its
// own name joins its node; a call without one comes from "unknown", as in
// Kiali.

// graphCallsPerService bounds the calls read per service and window; an
// edge of a service past it says truncated.
const graphCallsPerService = 100000

// defaultGraphWindow is the window when the query names none.
const defaultGraphWindow = time.Minute

// UnknownSource names the caller of calls without a client identity.
const UnknownSource = "unknown"

// GraphEdge is the calls from one source to one service in the window.
type GraphEdge struct {
	Source      string  `json:"source"`
	Destination string  `json:"destination"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	RPS         float64 `json:"requests_per_s"`
	ErrorRate   float64 `json:"error_rate"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	// MTLS is the share of the calls that came over TLS with a client
	// certificate (mutual TLS), 0 to 1.
	MTLS      float64 `json:"mtls"`
	Truncated bool    `json:"truncated,omitempty"`
}

// GraphNode is a service or a caller, with the calls it received.
type GraphNode struct {
	ID       string `json:"id"`
	Requests int64  `json:"requests"` // received through the gateway
	Errors   int64  `json:"errors"`
}

// Graph is the answer of GET /v1/calls/graph.
type Graph struct {
	From  time.Time   `json:"from"`
	To    time.Time   `json:"to"`
	Nodes []GraphNode `json:"nodes"`
	Edges []GraphEdge `json:"edges"`
}

// sourceOfPrincipal names a caller by its SPIFFE ID: NS/SA, the ID
// itself when it is not Istio's shape, UnknownSource without one.
func sourceOfPrincipal(p string) string {
	if p == "" {
		return UnknownSource
	}
	if ns, sa, ok := spiffeNamespaceAccount(p); ok {
		return ns + "/" + sa
	}
	return p
}

// buildGraph reads the calls of every service of log in [from, to).
func buildGraph(log *calllog.Log, from, to time.Time) (Graph, error) {
	g := Graph{From: from.UTC(), To: to.UTC(), Nodes: []GraphNode{}, Edges: []GraphEdge{}}
	type acc struct {
		e   GraphEdge
		lat []int64
		tls int64
	}
	edges := map[[2]string]*acc{}
	nodes := map[string]*GraphNode{}
	node := func(id string) *GraphNode {
		n := nodes[id]
		if n == nil {
			n = &GraphNode{ID: id}
			nodes[id] = n
		}
		return n
	}
	secs := to.Sub(from).Seconds()
	for _, svc := range log.Services() {
		calls, truncated, err := log.Calls(calllog.Query{Service: svc, From: from, To: to.Add(-1), Limit: graphCallsPerService})
		if err != nil {
			return Graph{}, err
		}
		for i := range calls {
			c := &calls[i]
			src := sourceOfPrincipal(c.Principal)
			k := [2]string{src, svc}
			a := edges[k]
			if a == nil {
				a = &acc{e: GraphEdge{Source: src, Destination: svc}}
				edges[k] = a
			}
			a.e.Truncated = a.e.Truncated || truncated
			a.e.Requests++
			dst := node(svc)
			dst.Requests++
			node(src)
			if c.Status >= 500 || c.Status == 0 || c.Reason != "" {
				a.e.Errors++
				dst.Errors++
			}
			if c.TLS && c.PeerCert {
				a.tls++
			}
			a.lat = append(a.lat, c.LatencyUs)
		}
	}
	for _, a := range edges {
		slices.Sort(a.lat)
		e := a.e
		e.RPS = round3(float64(e.Requests) / secs)
		e.ErrorRate = round3(float64(e.Errors) / float64(e.Requests))
		e.P50Ms, e.P99Ms = quantileMs(a.lat, 0.50), quantileMs(a.lat, 0.99)
		e.MTLS = round3(float64(a.tls) / float64(e.Requests))
		g.Edges = append(g.Edges, e)
	}
	for _, n := range nodes {
		g.Nodes = append(g.Nodes, *n)
	}
	slices.SortFunc(g.Edges, func(a, b GraphEdge) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Destination, b.Destination))
	})
	slices.SortFunc(g.Nodes, func(a, b GraphNode) int { return cmp.Compare(a.ID, b.ID) })
	return g, nil
}

// quantileMs is the q quantile of sorted microseconds, in milliseconds
// (nearest rank, as the call log's stats).
func quantileMs(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(max(int(math.Ceil(q*float64(len(sorted))))-1, 0), len(sorted)-1)
	return float64(sorted[i]) / 1000
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// serveGraph answers GET /v1/calls/graph?from=&to= (default: the last
// minute).
func serveGraph(w http.ResponseWriter, r *http.Request, log *calllog.Log) {
	if !flushed(w, log) {
		return
	}
	p := params{q: r.URL.Query()}
	from, to := p.time("from"), p.time("to")
	window := p.duration("window")
	if !p.ok(w) {
		return
	}
	if to.IsZero() {
		to = time.Now()
	}
	if from.IsZero() {
		from = to.Add(-cmp.Or(window, defaultGraphWindow))
	}
	if !from.Before(to) {
		writeError(w, http.StatusBadRequest, "invalid_argument", "from must be before to")
		return
	}
	g, err := buildGraph(log, from, to)
	if err != nil {
		writeQueryError(w, err)
		return
	}
	writeJSON(w, g)
}
