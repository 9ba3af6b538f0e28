package xds

import (
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"
)

// Metrics are the push latency figures: from a change's commit to the
// response carrying it being sent, and to its ACK; NACKs; bytes sent.
type Metrics struct {
	sent        *prometheus.HistogramVec
	acked       *prometheus.HistogramVec
	nacks       *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	subscribers prometheus.Gauge

	// The children of each type, resolved once: a label look-up per
	// response costs more than the observation.
	sentT, ackedT [numTypes]prometheus.Observer
	bytesT        [numTypes]prometheus.Counter
}

// LatencyBuckets run from 0.5 ms to about 65 s.
var LatencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 18)

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		sent: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sextant_push_sent_seconds", Help: "From a change's commit to the xDS response carrying it being sent, per subscriber.",
			Buckets: LatencyBuckets,
		}, []string{"type"}),
		acked: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sextant_push_acked_seconds", Help: "From a change's commit to the subscriber's ACK of the response carrying it.",
			Buckets: LatencyBuckets,
		}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_push_nacks_total", Help: "xDS responses rejected by subscribers.",
		}, []string{"type"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_push_sent_bytes_total", Help: "Bytes of xDS responses sent.",
		}, []string{"type"}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sextant_push_subscribers", Help: "Open xDS streams.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.acked, m.nacks, m.bytes, m.subscribers)
	}
	for t := range numTypes {
		m.sentT[t] = m.sent.WithLabelValues(t.String())
		m.ackedT[t] = m.acked.WithLabelValues(t.String())
		m.bytesT[t] = m.bytes.WithLabelValues(t.String())
	}
	return m
}

// nodeNamespace is the namespace a client says it runs in (node metadata
// NAMESPACE, as Istio's proxies send it, or namespace), used to resolve the
// short names it dials; "" when it says none.
func nodeNamespace(md map[string]*structpb.Value) string {
	for _, k := range []string{"NAMESPACE", "namespace"} {
		if v := md[k].GetStringValue(); v != "" {
			return v
		}
	}
	return ""
}
