package config

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1"
)

// A trafficPolicy's connectionPool limits: Envoy's circuit breakers and
// per-connection limits, as Istio's applyConnectionPool reads them (0
// means unset, as Istio cannot tell an unset int from 0 either).
func init() {
	allow(&networking.ConnectionPoolSettings_TCPSettings{}, "max_connections", "max_connection_duration", "tcp_keepalive")
	allow(&networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive{}, "probes", "time", "interval")
	allow(&networking.ConnectionPoolSettings_HTTPSettings{}, "http1_max_pending_requests", "http2_max_requests",
		"max_requests_per_connection", "max_retries", "max_concurrent_streams")
	// budgetInterval (requests counted over a time window) is not: the
	// gateway's budget is a share of the calls in flight.
	allow(&networking.TrafficPolicy{}, "retry_budget")
	allow(&networking.TrafficPolicy_RetryBudget{}, "percent", "min_retry_concurrency")
}

// Circuit is the connection pool's limits in force for a cluster. It is
// comparable (a Policy is compared with ==); the zero value sets no limit.
type Circuit struct {
	MaxConnections     uint32 // tcp.maxConnections
	MaxPendingRequests uint32 // http.http1MaxPendingRequests
	MaxRequests        uint32 // http.http2MaxRequests
	MaxRetries         uint32 // http.maxRetries
	// MaxRequestsPerConnection is http.maxRequestsPerConnection (1: no
	// keep-alive).
	MaxRequestsPerConnection uint32
	MaxConcurrentStreams     uint32        // http.maxConcurrentStreams (HTTP/2 endpoints)
	MaxConnectionDuration    time.Duration // tcp.maxConnectionDuration
	// Keepalive: tcp.tcpKeepalive is set (SO_KEEPALIVE), with its probes,
	// time and interval (0: the system's).
	Keepalive         bool
	KeepaliveProbes   uint32
	KeepaliveTime     time.Duration
	KeepaliveInterval time.Duration
	// RetryBudget is trafficPolicy.retryBudget: retries in flight at most
	// RetryBudgetPercent of the calls in flight, always at least
	// RetryBudgetMin (Istio's defaults: 20%, 3); it replaces maxRetries.
	RetryBudget        bool
	RetryBudgetPercent float64
	RetryBudgetMin     uint32
}

// retryBudgetOf sets c's retry budget from rb, as Istio's applyRetryBudget.
func (c *Circuit) retryBudgetOf(rb *networking.TrafficPolicy_RetryBudget) {
	if rb == nil {
		return
	}
	c.RetryBudget, c.RetryBudgetPercent, c.RetryBudgetMin = true, 20, 3
	if p := rb.GetPercent(); p != nil {
		c.RetryBudgetPercent = p.GetValue()
	}
	if m := rb.GetMinRetryConcurrency(); m > 0 {
		c.RetryBudgetMin = m
	}
}

func validateRetryBudget(c errs, path string, rb *networking.TrafficPolicy_RetryBudget) {
	if p := rb.GetPercent(); p != nil && (p.GetValue() < 0 || p.GetValue() > 100) {
		c.add(join(path, "percent"), ErrInvalid, "%v: want 0..100", p.GetValue())
	}
}

// circuitOf reads cp's limits.
func circuitOf(cp *networking.ConnectionPoolSettings) Circuit {
	var c Circuit
	if h := cp.GetHttp(); h != nil {
		c.MaxPendingRequests = positive(h.Http1MaxPendingRequests)
		c.MaxRequests = positive(h.Http2MaxRequests)
		c.MaxRetries = positive(h.MaxRetries)
		c.MaxRequestsPerConnection = positive(h.MaxRequestsPerConnection)
		c.MaxConcurrentStreams = positive(h.MaxConcurrentStreams)
	}
	if t := cp.GetTcp(); t != nil {
		c.MaxConnections = positive(t.MaxConnections)
		if d := t.MaxConnectionDuration; d != nil {
			c.MaxConnectionDuration = d.AsDuration()
		}
		if ka := t.TcpKeepalive; ka != nil {
			c.Keepalive = true
			c.KeepaliveProbes = ka.Probes
			if ka.Time != nil {
				c.KeepaliveTime = ka.Time.AsDuration()
			}
			if ka.Interval != nil {
				c.KeepaliveInterval = ka.Interval.AsDuration()
			}
		}
	}
	return c
}

func positive(v int32) uint32 {
	if v <= 0 {
		return 0
	}
	return uint32(v)
}

// validateConnPool checks the limits as Istio's validation does: counts
// not negative, durations positive (keepalive times in whole seconds, as
// Envoy takes them).
func validateConnPool(c errs, path string, cp *networking.ConnectionPoolSettings) {
	if h := cp.GetHttp(); h != nil {
		for _, f := range []struct {
			name string
			v    int32
		}{{"http1MaxPendingRequests", h.Http1MaxPendingRequests}, {"http2MaxRequests", h.Http2MaxRequests},
			{"maxRequestsPerConnection", h.MaxRequestsPerConnection}, {"maxRetries", h.MaxRetries},
			{"maxConcurrentStreams", h.MaxConcurrentStreams}} {
			if f.v < 0 {
				c.add(join(path, "http."+f.name), ErrInvalid, "%d: must not be negative", f.v)
			}
		}
	}
	t := cp.GetTcp()
	if t == nil {
		return
	}
	if t.MaxConnections < 0 {
		c.add(join(path, "tcp.maxConnections"), ErrInvalid, "%d: must not be negative", t.MaxConnections)
	}
	if d := t.MaxConnectionDuration; d != nil {
		validateDuration(c, join(path, "tcp.maxConnectionDuration"), d, true)
	}
	if ka := t.TcpKeepalive; ka != nil {
		keepaliveSeconds(c, join(path, "tcp.tcpKeepalive.time"), ka.Time)
		keepaliveSeconds(c, join(path, "tcp.tcpKeepalive.interval"), ka.Interval)
	}
}

// keepaliveSeconds checks a keepalive time: the socket option (and Envoy's
// field) is in whole seconds.
func keepaliveSeconds(c errs, path string, d *durationpb.Duration) {
	if d == nil {
		return
	}
	if v := d.AsDuration(); v < time.Second || v%time.Second != 0 {
		c.add(path, ErrInvalid, "%v: want whole seconds, at least 1s (the socket option's unit)", v)
	}
}
