package gateway

import (
	"net"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Istio's TCP metrics, for the gateway's TCP path: TLS passthrough
// (passthrough.go). The gateway does not open the TLS, so it knows the
// destination (the cluster's service) but not the caller: source labels
// are unknown, connection_security_policy none (destination) or unknown
// (source).

// istioTCPLabels are Istio's TCP labels: the HTTP ones without
// response_code and grpc_response_status.
var istioTCPLabels = slices.DeleteFunc(slices.Clone(istioLabels), func(l string) bool {
	return l == "response_code" || l == "grpc_response_status"
})

type istioTCPSeries struct {
	values                   []string // after reporter
	opened, closed           atomic.Uint64
	sentBytes, receivedBytes atomic.Uint64
}

// istioTCP counts a passthrough connection to cl opened, and returns the
// two connections counting their bytes, and the func to call when the
// connection has ended. Without Istio's metrics it returns them as they
// are.
func (g *Gateway) istioTCP(cl *clusterRT, down, up net.Conn) (net.Conn, net.Conn, func()) {
	m, ok := g.rec.(*istioMetrics)
	if !ok {
		return down, up, func() {}
	}
	s := m.tcpSeries(istioKey{service: cl.spec.service, subset: cl.spec.subsetName})
	s.opened.Add(1)
	return &countedConn{Conn: down, n: &s.receivedBytes}, &countedConn{Conn: up, n: &s.sentBytes}, func() { s.closed.Add(1) }
}

func (m *istioMetrics) tcpSeries(k istioKey) *istioTCPSeries {
	m.mu.RLock()
	s := m.tcp[k]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.tcp[k]; s != nil {
		return s
	}
	if len(m.series)+len(m.tcp) >= m.max {
		m.dropped.Add(1)
		if m.tcpOver == nil {
			vals := make([]string, len(istioTCPLabels)-1)
			for i := range vals {
				vals[i] = "other"
			}
			m.tcpOver = &istioTCPSeries{values: vals}
		}
		return m.tcpOver
	}
	all := istioLabelValues(k)
	vals := make([]string, 0, len(istioTCPLabels)-1)
	for i, v := range all {
		switch istioLabels[i+1] {
		case "response_code", "grpc_response_status":
			continue
		case "request_protocol":
			v = "tcp"
		case "response_flags":
			v = "-"
		}
		vals = append(vals, v)
	}
	s = &istioTCPSeries{values: vals}
	m.tcp[k] = s
	return s
}

func (m *istioMetrics) collectTCP(ch chan<- prometheus.Metric) {
	m.mu.RLock()
	all := make([]*istioTCPSeries, 0, len(m.tcp)+1)
	for _, s := range m.tcp {
		all = append(all, s)
	}
	if m.tcpOver != nil {
		all = append(all, m.tcpOver)
	}
	m.mu.RUnlock()
	for _, s := range all {
		for _, rep := range m.reporters {
			vals := append([]string{rep}, s.values...)
			if rep == "source" && s != m.tcpOver {
				vals[len(vals)-1] = "unknown"
			}
			ch <- prometheus.MustNewConstMetric(m.tcpOpened, prometheus.CounterValue, float64(s.opened.Load()), vals...)
			ch <- prometheus.MustNewConstMetric(m.tcpClosed, prometheus.CounterValue, float64(s.closed.Load()), vals...)
			ch <- prometheus.MustNewConstMetric(m.tcpSent, prometheus.CounterValue, float64(s.sentBytes.Load()), vals...)
			ch <- prometheus.MustNewConstMetric(m.tcpReceived, prometheus.CounterValue, float64(s.receivedBytes.Load()), vals...)
		}
	}
}

// countedConn counts the bytes read from its connection, as they move.
type countedConn struct {
	net.Conn
	n *atomic.Uint64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// CloseWrite half-closes as splice does with the bare connection.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
