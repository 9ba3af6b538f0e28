package calllog

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/callstore"
)

// ErrBadQuery wraps invalid query parameters.
var ErrBadQuery = errors.New("calllog: bad query")

// Query selects calls of one service.
type Query struct {
	Service  string
	Endpoint string // "" for every endpoint
	From, To time.Time
	// MinLatency and MaxLatency bound the latency (inclusive); 0 MaxLatency
	// means no upper bound.
	MinLatency, MaxLatency time.Duration
	// Limit caps the calls returned (default 1000, at most 100000).
	Limit int
	// Reason keeps only the calls of that reason ("": every call), e.g.
	// "rbac_denied" for the calls an RBAC filter denied.
	Reason string
}

// Call is one recorded call.
type Call struct {
	Start     time.Time     `json:"start"`
	Latency   time.Duration `json:"-"`
	LatencyUs int64         `json:"latency_us"`
	Service   string        `json:"service"`
	Cluster   string        `json:"cluster"`
	Route     string        `json:"route,omitempty"`
	Subset    string        `json:"subset,omitempty"`
	Endpoint  string        `json:"endpoint,omitempty"`
	Status    int           `json:"status"`
	Retries   int           `json:"retries"`
	Reason    string        `json:"reason,omitempty"`
	// GRPCStatus is the answer's grpc-status; nil for an answer that is
	// not gRPC.
	GRPCStatus *int   `json:"grpc_status,omitempty"`
	BytesIn    uint32 `json:"bytes_in"`
	BytesOut   uint32 `json:"bytes_out"`
	// Detail: the RBAC policy of an rbac_denied call.
	Detail string `json:"detail,omitempty"`
	// Layout is the record's layout version: 1 records have none of the
	// fields below.
	Layout    int    `json:"layout"`
	Principal string `json:"principal,omitempty"`
	Subject   string `json:"subject,omitempty"`
	Method    string `json:"method,omitempty"`
	Path      string `json:"path,omitempty"`
	Host      string `json:"host,omitempty"`
	Port      int    `json:"port,omitempty"`
	PeerIP    string `json:"peer_ip,omitempty"`
	TLS       bool   `json:"tls,omitempty"`
	PeerCert  bool   `json:"peer_cert,omitempty"`
	// OtherNames: the peer certificate has names the record does not keep
	// (URI SANs after the first, DNS SANs).
	OtherNames bool `json:"other_names,omitempty"`
	// NotKept names the fields (principal, subject, method, path, host) whose
	// value the partition's dictionary had no room for (Options.DictLimit):
	// unknown, not empty.
	NotKept []string `json:"not_kept,omitempty"`
	// UpstreamPrincipal is the endpoint certificate's first URI SAN (the
	// server's SPIFFE ID) of a call sent over TLS; "" otherwise.
	UpstreamPrincipal string `json:"upstream_principal,omitempty"`
	// TraceID is the call's trace (32 hex digits) when the gateway exported
	// its span (layout v3); "" otherwise.
	TraceID string `json:"trace_id,omitempty"`
}

// fill sets c's detail and, in layout v2, its request fields from b.
func (c *Call) fill(b *body, d *dict) {
	c.Layout = int(b.version)
	if b.trace != [16]byte{} {
		c.TraceID = hex.EncodeToString(b.trace[:])
	}
	if b.version < 2 {
		if b.detail != 0 {
			c.Detail = d.name(b.detail)
		}
		return
	}
	q, ok := parseRequest(d.name(b.detail))
	if !ok {
		return
	}
	c.Detail, c.Principal, c.Subject, c.Method, c.Path, c.Host = q.detail, q.principal, q.subject, q.method, q.path, q.host
	c.UpstreamPrincipal = q.upstream
	c.Port = int(q.port)
	if q.peer.IsValid() {
		c.PeerIP = q.peer.String()
	}
	c.TLS, c.PeerCert, c.OtherNames = q.conn&ConnTLS != 0, q.conn&ConnPeerCert != 0, q.conn&ConnOtherNames != 0
	c.NotKept = q.dropped.names()
}

func (q *Query) check() error {
	if q.Service == "" {
		return fmt.Errorf("%w: service is required", ErrBadQuery)
	}
	if q.To.IsZero() {
		q.To = time.Unix(0, math.MaxInt64)
	}
	if q.To.Before(q.From) {
		return fmt.Errorf("%w: to is before from", ErrBadQuery)
	}
	if q.MinLatency < 0 || q.MaxLatency < 0 || (q.MaxLatency > 0 && q.MaxLatency < q.MinLatency) {
		return fmt.Errorf("%w: latency bounds", ErrBadQuery)
	}
	if q.Reason != "" && ReasonCode(q.Reason) == ReasonOther && q.Reason != "other" {
		return fmt.Errorf("%w: reason %q is not a call record reason (%s)", ErrBadQuery, q.Reason, strings.Join(reasonNames[1:], ", "))
	}
	switch {
	case q.Limit == 0:
		q.Limit = 1000
	case q.Limit < 0 || q.Limit > 100000:
		return fmt.Errorf("%w: limit %d not in [1, 100000]", ErrBadQuery, q.Limit)
	}
	return nil
}

// scan reads the messages of q's service in its window from every segment
// that may hold them, in start order, and calls fn for those of q's
// endpoint until fn returns false. It reads no other service's records.
func (l *Log) scan(q *Query, fn func(m *callstore.Message, b *body) bool) (*dict, error) {
	from, to := unixNano(q.From), unixNano(q.To)
	aMin := q.MinLatency.Microseconds()
	aMax := int64(math.MaxInt64)
	if q.MaxLatency > 0 {
		aMax = q.MaxLatency.Microseconds()
	}
	l.mu.Lock()
	p := l.parts[q.Service]
	if p == nil {
		l.mu.Unlock()
		return nil, nil
	}
	var segs []*segment
	for _, s := range p.segs {
		if s.maxT < from || s.minT > to {
			continue
		}
		if s.store == nil {
			st, err := callstore.Open(s.dir, l.opts.Store)
			if err != nil {
				l.mu.Unlock()
				l.release(segs)
				return nil, fmt.Errorf("calllog: open segment: %w", err)
			}
			s.store = st
		}
		s.refs++
		s.lastUse = l.opts.Now()
		segs = append(segs, s)
	}
	l.mu.Unlock()
	defer l.release(segs)
	var epID uint32
	if q.Endpoint != "" {
		id, ok := p.dict.lookup(q.Endpoint)
		if !ok {
			return p.dict, nil
		}
		epID = id
	}
	var msgs []callstore.Message
	for _, s := range segs {
		var err error
		msgs, err = s.store.AppendMessages(msgs[:0], aMin, aMax, from, to)
		if err != nil {
			return nil, fmt.Errorf("calllog: %s: %w", q.Service, err)
		}
		for i := range msgs {
			b := decodeBody(&msgs[i].Body)
			if q.Endpoint != "" && b.endpoint != epID {
				continue
			}
			if !fn(&msgs[i], &b) {
				return p.dict, nil
			}
		}
	}
	return p.dict, nil
}

func (l *Log) release(segs []*segment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range segs {
		s.refs--
		if s.deleted && s.refs == 0 {
			l.note(l.removeLocked(s))
		}
	}
	l.evictLocked()
}

// Calls returns the calls q selects, oldest first, and whether the limit
// cut the answer.
func (l *Log) Calls(q Query) ([]Call, bool, error) {
	if err := q.check(); err != nil {
		return nil, false, err
	}
	var out []Call
	truncated := false
	var bodies []body
	var msgs []callstore.Message
	want := ReasonCode(q.Reason)
	d, err := l.scan(&q, func(m *callstore.Message, b *body) bool {
		if q.Reason != "" && b.reason != want {
			return true // not one of these: read on
		}
		if len(msgs) == q.Limit {
			truncated = true
			return false
		}
		msgs = append(msgs, *m)
		bodies = append(bodies, *b)
		return true
	})
	if err != nil || d == nil {
		return nil, false, err
	}
	// Segments overlap in t only by calls that ended late: sort to be sure.
	idx := make([]int, len(msgs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case msgs[a].T < msgs[b].T:
			return -1
		case msgs[a].T > msgs[b].T:
			return 1
		}
		return 0
	})
	out = make([]Call, 0, len(msgs))
	for _, i := range idx {
		m, b := &msgs[i], &bodies[i]
		out = append(out, Call{
			Start: time.Unix(0, m.T).UTC(), Latency: time.Duration(m.A) * time.Microsecond, LatencyUs: m.A,
			Service: q.Service, Cluster: d.name(b.cluster), Route: d.name(b.route), Subset: d.name(b.subset),
			Endpoint: d.name(b.endpoint), Status: int(b.status), Retries: int(b.retries), Reason: b.reason.String(),
			BytesIn: b.bytesIn, BytesOut: b.bytesOut, GRPCStatus: grpcStatus(b.grpc),
		})
		out[len(out)-1].fill(b, d)
	}
	return out, truncated, nil
}

// StatsQuery asks for per-step statistics of one service.
type StatsQuery struct {
	Service  string
	Endpoint string
	From, To time.Time
	Step     time.Duration // default: (To-From)/60, at least 1s
}

// Step is the statistics of the calls that started in [Start, Start+step).
type Step struct {
	Start  time.Time `json:"start"`
	Count  int64     `json:"count"`
	Errors int64     `json:"errors"`
	AvgMs  float64   `json:"avg_ms"`
	P50Ms  float64   `json:"p50_ms"`
	P90Ms  float64   `json:"p90_ms"`
	P99Ms  float64   `json:"p99_ms"`
}

// check validates what Stats and Endpoints both need: a service and a
// window.
func (q *StatsQuery) check() error {
	if q.Service == "" {
		return fmt.Errorf("%w: service is required", ErrBadQuery)
	}
	if q.From.IsZero() || q.To.IsZero() || !q.From.Before(q.To) {
		return fmt.Errorf("%w: from and to are required, from before to", ErrBadQuery)
	}
	return nil
}

// ceilDiv is a/b rounded up, for a >= 0 and b > 0.
func ceilDiv(a, b time.Duration) time.Duration {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// maxSteps bounds a stats answer.
const maxSteps = 10000

// Stats returns one Step per step of [From, To) (empty steps included).
func (l *Log) Stats(q StatsQuery) ([]Step, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	// span saturates at the largest Duration; rounding up by division
	// and remainder never overflows (adding step-1 to it did).
	span := q.To.Sub(q.From)
	if q.Step <= 0 {
		q.Step = max(ceilDiv(span, 60), time.Second)
	}
	steps64 := ceilDiv(span, q.Step)
	if span == math.MaxInt64 || steps64 > maxSteps {
		return nil, fmt.Errorf("%w: %d steps, at most %d (use a larger step or a shorter range)", ErrBadQuery, steps64, maxSteps)
	}
	n := int(steps64)
	lat := make([][]int64, n)
	steps := make([]Step, n)
	sums := make([]int64, n)
	from := q.From.UnixNano()
	cq := Query{Service: q.Service, Endpoint: q.Endpoint, From: q.From, To: q.To.Add(-1)}
	if _, err := l.scan(&cq, func(m *callstore.Message, b *body) bool {
		i := int((m.T - from) / int64(q.Step))
		if i < 0 || i >= n {
			return true
		}
		steps[i].Count++
		if b.isError() {
			steps[i].Errors++
		}
		sums[i] += m.A
		lat[i] = append(lat[i], m.A)
		return true
	}); err != nil {
		return nil, err
	}
	for i := range steps {
		steps[i].Start = q.From.Add(time.Duration(i) * q.Step).UTC()
		if steps[i].Count == 0 {
			continue
		}
		slices.Sort(lat[i])
		steps[i].AvgMs = float64(sums[i]) / float64(steps[i].Count) / 1000
		steps[i].P50Ms = quantile(lat[i], 0.50)
		steps[i].P90Ms = quantile(lat[i], 0.90)
		steps[i].P99Ms = quantile(lat[i], 0.99)
	}
	return steps, nil
}

// quantile of sorted microseconds, in milliseconds (nearest rank).
func quantile(sorted []int64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / 1000
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// EndpointStats is what one endpoint of a service answered in a window.
type EndpointStats struct {
	Endpoint string  `json:"endpoint"` // host:port; "" for calls no endpoint was picked for
	Count    int64   `json:"count"`
	Errors   int64   `json:"errors"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
}

// Endpoints returns per-endpoint statistics of q's service over [From,
// To), in endpoint order: which endpoint fails or is slow, where Stats
// sums them all. q.Step and q.Endpoint are ignored.
func (l *Log) Endpoints(q StatsQuery) ([]EndpointStats, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	type acc struct {
		st  EndpointStats
		lat []int64
	}
	by := map[uint32]*acc{}
	cq := Query{Service: q.Service, From: q.From, To: q.To.Add(-1)}
	d, err := l.scan(&cq, func(m *callstore.Message, b *body) bool {
		a := by[b.endpoint]
		if a == nil {
			a = &acc{}
			by[b.endpoint] = a
		}
		a.st.Count++
		if b.isError() {
			a.st.Errors++
		}
		a.lat = append(a.lat, m.A)
		return true
	})
	if err != nil || d == nil {
		return nil, err
	}
	out := make([]EndpointStats, 0, len(by))
	for id, a := range by {
		slices.Sort(a.lat)
		a.st.Endpoint = d.name(id)
		a.st.P50Ms = quantile(a.lat, 0.50)
		a.st.P99Ms = quantile(a.lat, 0.99)
		out = append(out, a.st)
	}
	slices.SortFunc(out, func(a, b EndpointStats) int { return strings.Compare(a.Endpoint, b.Endpoint) })
	return out, nil
}

// grpcStatus decodes the stored grpc-status (+1; 0 is none).
func grpcStatus(v uint8) *int {
	if v == 0 {
		return nil
	}
	s := int(v) - 1
	return &s
}
