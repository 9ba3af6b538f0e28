package gateway

import (
	"errors"
	"math"
	"net"
	"sync/atomic"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/subset"
)

// Circuit breaking: a cluster's circuit_breakers thresholds (the DEFAULT
// priority's, as Istio publishes one) enforced per cluster as Envoy's
// connection pools do, and the per-connection limits of its HTTP/1.1
// connections (common_http_protocol_options, upstream_connection_options).
//
// An attempt first takes a request (max_requests); to an HTTP/1.1
// cluster it then takes a connection (max_connections: one connection
// carries one request at a time, so a connection is an attempt in flight),
// or waits for one in the pending queue (max_pending_requests), until the
// route's timeout. A request or pending slot that is not to be had
// overflows: the call is answered 503 with x-envoy-overloaded (the call
// record's reason pool_overflow, Envoy's flag UO), never retried, and
// counted as Envoy's upstream_rq_pending_overflow. A retry over
// max_retries is not made (upstream_rq_retry_overflow).

// overflowHeader is what Envoy's router adds to a 503 it answers because
// a circuit breaker overflowed.
const overflowHeader = "X-Envoy-Overloaded"

// The overflow counters, by Envoy's statistic names.
const (
	overflowPending = iota // upstream_rq_pending_overflow: calls refused
	overflowConns          // upstream_cx_overflow: calls that had to wait for a connection
	overflowRetries        // upstream_rq_retry_overflow: retries not made
	overflowKinds
)

var overflowNames = [overflowKinds]string{"upstream_rq_pending_overflow", "upstream_cx_overflow", "upstream_rq_retry_overflow"}

func newOverflowVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_gateway_circuit_overflow_total",
		Help: "Circuit breaker overflows per cluster, by Envoy's statistic: upstream_rq_pending_overflow (calls answered 503, " +
			"over max_requests or max_pending_requests), upstream_cx_overflow (calls that waited for a connection, at max_connections), " +
			"upstream_rq_retry_overflow (retries not made, over max_retries or the retry budget)."}, []string{"cluster", "kind"})
}

// circuitSpec is a cluster's thresholds; math.MaxInt64 is no limit. The
// zero value (no circuit_breakers sent) limits nothing, as before the
// gateway read them (Envoy would apply its defaults of 1,024).
type circuitSpec struct {
	set                               bool
	maxConns, maxPending, maxRequests int64
}

func (s circuitSpec) limited() bool {
	return s.set && (s.maxConns != math.MaxInt64 || s.maxPending != math.MaxInt64 || s.maxRequests != math.MaxInt64)
}

// connOpts are the per-connection settings of a cluster's HTTP/1.1
// connections; clusters with different ones do not share a pool.
type connOpts struct {
	maxRequests uint32        // max_requests_per_connection; 0: no limit
	maxDuration time.Duration // max_connection_duration; 0: none
	idle        time.Duration // idle_timeout; 0: the gateway's default (defaultUpstreamIdle); < 0: none
	keepalive   bool          // tcp_keepalive given: SO_KEEPALIVE on
	kaProbes    int
	kaIdle      time.Duration
	kaInterval  time.Duration
}

// decodeCircuit reads the cluster's circuit breakers and per-connection
// settings into s.
func decodeCircuit(c *cluster.Cluster, s *clusterSpec) error {
	for _, t := range c.GetCircuitBreakers().GetThresholds() {
		if t.GetPriority() != core.RoutingPriority_DEFAULT {
			continue // the gateway routes at one priority
		}
		s.circuit.set = true
		// Envoy's defaults where a threshold is absent: 1,024 each, 3
		// retries (Istio sends every one).
		s.circuit.maxConns = threshold(t.GetMaxConnections(), 1024)
		s.circuit.maxPending = threshold(t.GetMaxPendingRequests(), 1024)
		s.circuit.maxRequests = threshold(t.GetMaxRequests(), 1024)
		if t.GetRetryBudget() == nil {
			// max_retries in force instead of a budget, as in Envoy; the
			// largest value (Istio's default) leaves the gateway's budget.
			if r := threshold(t.GetMaxRetries(), 3); r != math.MaxInt64 {
				s.budget = retryBudget{min: int(r)}
			}
		}
	}
	var common *core.HttpProtocolOptions
	if a, ok := c.GetTypedExtensionProtocolOptions()[httpOptionsKey]; ok {
		o := new(upstreamhttp.HttpProtocolOptions)
		if err := a.UnmarshalTo(o); err != nil {
			return fieldErr("typed_extension_protocol_options", "%v", err)
		}
		common = o.GetCommonHttpProtocolOptions()
	}
	if common == nil {
		common = c.GetCommonHttpProtocolOptions()
	}
	if v := common.GetMaxRequestsPerConnection(); v != nil {
		s.conn.maxRequests = v.GetValue()
	}
	if d := common.GetMaxConnectionDuration(); d != nil {
		t, err := duration(d, "common_http_protocol_options.max_connection_duration")
		if err != nil {
			return err
		}
		s.conn.maxDuration = t
	}
	if d := common.GetIdleTimeout(); d != nil {
		t, err := duration(d, "common_http_protocol_options.idle_timeout")
		if err != nil {
			return err
		}
		s.conn.idle = t
		if t == 0 {
			s.conn.idle = -1 // Envoy's 0s: disabled
		}
	}
	if ka := c.GetUpstreamConnectionOptions().GetTcpKeepalive(); ka != nil {
		s.conn.keepalive = true
		s.conn.kaProbes = int(ka.GetKeepaliveProbes().GetValue())
		s.conn.kaIdle = time.Duration(ka.GetKeepaliveTime().GetValue()) * time.Second
		s.conn.kaInterval = time.Duration(ka.GetKeepaliveInterval().GetValue()) * time.Second
	}
	return nil
}

// threshold is a threshold's value, def when absent; the largest uint32
// (Istio's "no limit") is none.
func threshold(v *wrapperspb.UInt32Value, def uint32) int64 {
	n := def
	if v != nil {
		n = v.GetValue()
	}
	if n == math.MaxUint32 {
		return math.MaxInt64
	}
	return int64(n)
}

// circuit is a cluster's circuit breakers at run time: counters the
// calls of the cluster's current version share (a new version starts
// from zero, as Envoy's new cluster does).
type circuit struct {
	spec     circuitSpec
	requests atomic.Int64
	pending  atomic.Int64
	// conns holds a token per HTTP/1.1 connection in use; nil: no
	// connection limit (or an HTTP/2 cluster, whose connections carry
	// many requests).
	conns    chan struct{}
	overflow *[overflowKinds]prometheus.Counter
}

// newCircuit returns the cluster's circuit breakers, nil when it has no
// limit (every call then skips them).
func newCircuit(spec *clusterSpec, m *clusterMetrics) *circuit {
	if !spec.circuit.limited() {
		return nil
	}
	cb := &circuit{spec: spec.circuit, overflow: &m.overflow}
	if spec.circuit.maxConns != math.MaxInt64 && !spec.h2c {
		cb.conns = make(chan struct{}, spec.circuit.maxConns)
	}
	return cb
}

// errOverflow is an attempt refused by a circuit breaker.
var errOverflow = errors.New("gateway: circuit breaker overflow")

// enter takes a request and, to an HTTP/1.1 cluster, a connection,
// waiting in the pending queue until deadline (zero: none) if need be.
// nil: the caller must leave; errOverflow, or fasthttp.ErrTimeout when the
// deadline passed while pending. Any call's goroutine; may block.
func (cb *circuit) enter(deadline time.Time) error {
	if cb.requests.Add(1) > cb.spec.maxRequests {
		cb.requests.Add(-1)
		cb.overflow[overflowPending].Inc()
		return errOverflow
	}
	if cb.conns == nil {
		return nil
	}
	select {
	case cb.conns <- struct{}{}:
		return nil
	default:
	}
	cb.overflow[overflowConns].Inc()
	if cb.pending.Add(1) > cb.spec.maxPending {
		cb.pending.Add(-1)
		cb.requests.Add(-1)
		cb.overflow[overflowPending].Inc()
		return errOverflow
	}
	err := cb.wait(deadline)
	cb.pending.Add(-1)
	if err != nil {
		cb.requests.Add(-1)
	}
	return err
}

// wait blocks until a connection is free (waiters are served in order) or
// deadline passes.
func (cb *circuit) wait(deadline time.Time) error {
	if deadline.IsZero() {
		cb.conns <- struct{}{}
		return nil
	}
	d := time.Until(deadline)
	if d <= 0 {
		return fasthttp.ErrTimeout
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case cb.conns <- struct{}{}:
		return nil
	case <-t.C:
		return fasthttp.ErrTimeout
	}
}

// leave gives back what enter took.
func (cb *circuit) leave() {
	if cb.conns != nil {
		<-cb.conns
	}
	cb.requests.Add(-1)
}

// enterCircuit passes the attempt through its cluster's circuit breakers;
// false: the attempt is not to be sent (k's error and reason say why, the
// pick is given back).
func (k *call) enterCircuit(res subset.Result) bool {
	err := k.c.cb.enter(k.deadline)
	if err == nil {
		return true
	}
	k.release()
	res.Done(0, balancer.Canceled) // nothing learned of the endpoint
	k.err, k.status, k.endpoint = err, 0, ""
	k.reason = reasonOverflow
	if err != errOverflow {
		k.reason = reasonTimeout
	}
	return false
}

// spentConn is an HTTP/1.1 connection of a cluster with
// max_requests_per_connection or max_connection_duration: it counts its
// requests and knows when its time is up.
type spentConn struct {
	net.Conn
	left  uint32    // requests it may still carry; 0: no limit
	until time.Time // the end of its max_connection_duration; zero: none
}

// connSpent reports whether conn may carry no further request: it has
// carried its last (its cluster's max_requests_per_connection), counting
// the one just answered, or its max_connection_duration has passed at now.
// Called by roundTrip once per request on the connection's holder.
func connSpent(conn net.Conn, now time.Time) bool {
	sc, ok := conn.(*spentConn)
	if !ok {
		return false
	}
	if sc.left > 0 {
		sc.left--
		if sc.left == 0 {
			return true
		}
	}
	return connExpired(sc, now)
}

// connExpired reports whether conn's max_connection_duration has passed at
// now: a pooled connection so old is closed instead of used (Envoy closes
// an idle one at that time; the gateway when it would use it next, or when
// the pool's idle cleaner does).
func connExpired(conn net.Conn, now time.Time) bool {
	sc, ok := conn.(*spentConn)
	return ok && !sc.until.IsZero() && !now.Before(sc.until)
}

// dialer returns the dial function of an HTTP/1.1 pool with opts over
// dial.
func (o connOpts) dialer(dial fasthttp.DialFunc) fasthttp.DialFunc {
	if o.maxRequests == 0 && o.maxDuration <= 0 {
		return dial
	}
	return func(addr string) (net.Conn, error) {
		c, err := dial(addr)
		if err != nil {
			return nil, err
		}
		sc := &spentConn{Conn: c, left: o.maxRequests}
		if o.maxDuration > 0 {
			sc.until = time.Now().Add(o.maxDuration)
		}
		return sc, nil
	}
}

// defaultUpstreamIdle is how long a pooled connection to an endpoint may
// sit idle when its cluster sets no idle_timeout.
const defaultUpstreamIdle = 60 * time.Second

// idleTimeout is how long a pooled connection may sit idle before it is
// closed (idle_timeout; "disabled" is a century).
func (o connOpts) idleTimeout() time.Duration {
	switch {
	case o.idle > 0:
		return o.idle
	case o.idle < 0:
		return 100 * 365 * 24 * time.Hour
	}
	return defaultUpstreamIdle
}

// netDialer is the plaintext dialer of a pool with opts: with
// tcp_keepalive, SO_KEEPALIVE with its times (0: the system's).
func (o connOpts) netDialer(connect time.Duration) *net.Dialer {
	d := &net.Dialer{Timeout: connect}
	if o.keepalive {
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: o.kaIdle, Interval: o.kaInterval, Count: o.kaProbes}
		if d.KeepAliveConfig.Idle == 0 {
			d.KeepAliveConfig.Idle = -1 // the system's
		}
		if d.KeepAliveConfig.Interval == 0 {
			d.KeepAliveConfig.Interval = -1
		}
		if d.KeepAliveConfig.Count == 0 {
			d.KeepAliveConfig.Count = -1
		}
	}
	return d
}

// connect takes a connection of a TCP route's cluster, false at
// max_connections: Envoy's tcp_proxy closes the client's connection then
// (upstream_cx_overflow), it does not queue it. A nil circuit always
// connects.
func (cb *circuit) connect() bool {
	if cb == nil || cb.conns == nil {
		return true
	}
	select {
	case cb.conns <- struct{}{}:
		return true
	default:
		cb.overflow[overflowConns].Inc()
		return false
	}
}

// disconnect gives back what connect took.
func (cb *circuit) disconnect() {
	if cb != nil && cb.conns != nil {
		<-cb.conns
	}
}
