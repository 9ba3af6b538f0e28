package gateway

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

// metricsSet holds the gateway's Prometheus metrics. Per-cluster and
// per-endpoint handles are resolved once, when a cluster or endpoint
// appears, so a call never looks labels up.
type metricsSet struct {
	reg *prometheus.Registry
	// Calls and their latency per cluster and per endpoint are atomics
	// of their own (callCounts), read at scrape (callCollector).
	requests   *prometheus.Desc       // cluster, class
	latency    *prometheus.Desc       // cluster
	epRequests *prometheus.Desc       // cluster, endpoint, class
	epLatency  *prometheus.Desc       // cluster, endpoint
	retries    *prometheus.CounterVec // cluster
	shed       *prometheus.CounterVec // cluster
	upgrades   *prometheus.CounterVec // cluster
	overflow   *prometheus.CounterVec // cluster, kind (circuit.go)
	config     *prometheus.GaugeVec   // type, version
	// tlsHandshakeErrors counts failed TLS handshakes (tls.go).
	tlsHandshakeErrors prometheus.Counter
	// passthrough counts TLS passthrough connections (passthrough.go).
	passthrough *prometheus.CounterVec // cluster, result
	// tcp counts plain TCP connections (tcp.go).
	tcp *prometheus.CounterVec // cluster, result
	// rbac counts RBAC decisions by result (rbac.go).
	rbac [rbacResults]prometheus.Counter
	// hcChecks counts active health checks by cluster and result.
	hcChecks *prometheus.CounterVec

	ejections *prometheus.Desc
	ejected   *prometheus.Desc

	mu        sync.Mutex
	clusters  map[string]*clusterMetrics
	endpoints map[[2]string]*endpointMetrics
}

// classes are the status classes counted; 0 is "no answer".
var classes = [...]string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}

func classOf(status int) int {
	if status < 100 || status > 599 {
		return 0
	}
	return status / 100
}

type clusterMetrics struct {
	callCounts
	retries  prometheus.Counter
	shed     prometheus.Counter
	upgrades prometheus.Counter
	overflow [overflowKinds]prometheus.Counter
}

type endpointMetrics struct{ callCounts }

// callCounts are a cluster's or an endpoint's calls by status class and
// their latency: two atomic adds a histogram, where client_golang's
// Observe makes four and a compare-and-swap loop (issue 48).
type callCounts struct {
	requests [len(classes)]atomic.Uint64
	latency  istioHist // nanoseconds summed; bounds latencyBucketsNS
}

func (c *callCounts) observe(status int, d time.Duration) {
	c.requests[classOf(status)].Add(1)
	ns := max(d.Nanoseconds(), 0)
	c.latency.observe(latencyBucketsNS, float64(ns), uint64(ns))
}

var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// latencyBucketsNS are latencyBuckets in nanoseconds (the unit observed).
var latencyBucketsNS = func() []float64 {
	b := make([]float64, len(latencyBuckets))
	for i, s := range latencyBuckets {
		b[i] = s * 1e9
	}
	return b
}()

func newMetrics() *metricsSet {
	m := &metricsSet{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewDesc("sextant_gateway_requests_total",
			"Calls per cluster by status class (none: no upstream answer).", []string{"cluster", "class"}, nil),
		latency: prometheus.NewDesc("sextant_gateway_request_duration_seconds",
			"Call latency per cluster, retries included.", []string{"cluster"}, nil),
		epRequests: prometheus.NewDesc("sextant_gateway_endpoint_requests_total",
			"Attempts per endpoint by status class (none: connect failure, reset or timeout).", []string{"cluster", "endpoint", "class"}, nil),
		epLatency: prometheus.NewDesc("sextant_gateway_endpoint_request_duration_seconds",
			"Attempt latency per endpoint.", []string{"cluster", "endpoint"}, nil),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_gateway_retries_total",
			Help: "Retries per cluster."}, []string{"cluster"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_gateway_shed_total",
			Help: "Calls shed by the balancer (every endpoint at capacity) per cluster."}, []string{"cluster"}),
		upgrades: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_gateway_upgrades_total",
			Help: "Upgrade requests (WebSocket) per cluster, whatever their answer; requests_total counts them by status."}, []string{"cluster"}),
		config: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sextant_gateway_config_info",
			Help: "1 for the xDS version applied per resource type."}, []string{"type", "version"}),
		overflow:  newOverflowVec(),
		clusters:  map[string]*clusterMetrics{},
		endpoints: map[[2]string]*endpointMetrics{},
	}
	m.tlsHandshakeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "sextant_gateway_tls_handshake_errors_total",
		Help: "TLS handshakes that failed (no filter chain or certificate for the server name, no client certificate, not TLS)."})
	rbac := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_gateway_rbac_total",
		Help: "RBAC filter decisions by result (allowed, denied, shadow_allowed, shadow_denied: shadow rules, not enforced; logged: a LOG policy matched)."}, []string{"result"})
	for i, n := range rbacResultNames {
		m.rbac[i] = rbac.WithLabelValues(n)
	}
	m.hcChecks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_gateway_health_checks_total",
		Help: "Active health checks per cluster by result (success, failure)."}, []string{"cluster", "result"})
	m.reg.MustRegister(rbac, m.hcChecks)
	m.reg.MustRegister(callCollector{m}, m.retries, m.shed, m.upgrades, m.overflow, m.config, m.tlsHandshakeErrors)
	m.passthrough = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_gateway_tls_passthrough_total",
		Help: "TLS passthrough connections per cluster by result: connected, connect_failure, no_healthy_endpoint, cluster_not_found."}, []string{"cluster", "result"})
	m.reg.MustRegister(m.passthrough)
	m.tcp = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sextant_gateway_tcp_connections_total",
		Help: "TCP connections (Gateway TCP servers) per cluster by result: connected, connect_failure, no_healthy_endpoint, cluster_not_found, no_chain."}, []string{"cluster", "result"})
	m.reg.MustRegister(m.tcp)
	m.ejections = prometheus.NewDesc("sextant_gateway_ejections_total",
		"Outlier ejections per cluster (since the cluster's policy was built).", []string{"cluster"}, nil)
	m.ejected = prometheus.NewDesc("sextant_gateway_endpoint_ejected",
		"1 while outlier detection keeps the endpoint out of its cluster, else 0.", []string{"cluster", "endpoint"}, nil)
	return m
}

func (m *metricsSet) cluster(name string) *clusterMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clusters[name]; ok {
		return c
	}
	c := &clusterMetrics{callCounts: newCallCounts(),
		retries: m.retries.WithLabelValues(name), shed: m.shed.WithLabelValues(name), upgrades: m.upgrades.WithLabelValues(name)}
	for i, kind := range overflowNames {
		c.overflow[i] = m.overflow.WithLabelValues(name, kind)
	}
	m.clusters[name] = c
	return c
}

func (m *metricsSet) endpoint(cluster, addr string) *endpointMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{cluster, addr}
	if e, ok := m.endpoints[k]; ok {
		return e
	}
	e := &endpointMetrics{newCallCounts()}
	m.endpoints[k] = e
	return e
}

// forgetEndpoint drops a removed endpoint's series.
func (m *metricsSet) forgetEndpoint(cluster, addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.endpoints, [2]string{cluster, addr})
}

func newCallCounts() callCounts { return callCounts{latency: newIstioHist(latencyBucketsNS)} }

// callCollector reads the clusters' and endpoints' callCounts at scrape.
type callCollector struct{ m *metricsSet }

func (c callCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.requests
	ch <- c.m.latency
	ch <- c.m.epRequests
	ch <- c.m.epLatency
}

func (c callCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, cm := range m.clusters {
		cm.collect(ch, m.requests, m.latency, name)
	}
	for k, em := range m.endpoints {
		em.collect(ch, m.epRequests, m.epLatency, k[0], k[1])
	}
}

func (c *callCounts) collect(ch chan<- prometheus.Metric, requests, latency *prometheus.Desc, labels ...string) {
	for i, class := range classes {
		ch <- prometheus.MustNewConstMetric(requests, prometheus.CounterValue, float64(c.requests[i].Load()), append(labels, class)...)
	}
	n, ns, sum := c.latency.snapshot(latencyBucketsNS, 1e-9)
	buckets := make(map[float64]uint64, len(ns))
	for i, b := range latencyBucketsNS {
		buckets[latencyBuckets[i]] = ns[b]
	}
	ch <- prometheus.MustNewConstHistogram(latency, n, sum, buckets, labels...)
}

// ejectionCollector reads each cluster's ejection count at scrape time.
type ejectionCollector struct{ g *Gateway }

func (c ejectionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.g.metrics.ejections
	ch <- c.g.metrics.ejected
}

func (c ejectionCollector) Collect(ch chan<- prometheus.Metric) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	for name, rt := range c.g.clusters {
		if ec, ok := rt.policy.(balancer.EjectionCounter); ok {
			ch <- prometheus.MustNewConstMetric(c.g.metrics.ejections, prometheus.CounterValue, float64(ec.Ejections()), name)
		}
		el, ok := rt.policy.(balancer.EjectedLister)
		if !ok {
			continue
		}
		ejected := el.Ejected() // endpoint ids are their addresses
		for addr := range *rt.eps.Load() {
			v := 0.0
			if slices.Contains(ejected, addr) {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.g.metrics.ejected, prometheus.GaugeValue, v, name, addr)
		}
	}
}
