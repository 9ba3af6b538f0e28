package push

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	recompute *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		recompute: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sextant_push_recompute_seconds",
			Help:    "Time to recompute resources: path=endpoint (one service's endpoint sets), config (one config round), full (every cluster and route).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 20),
		}, []string{"path"}),
	}
	if reg != nil {
		reg.MustRegister(m.recompute)
	}
	return m
}
