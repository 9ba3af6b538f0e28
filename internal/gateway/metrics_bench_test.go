package gateway

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkCallMetrics is what a call's cluster or endpoint metrics cost
// it: callCounts against the client_golang counter and histogram they
// replaced (issue 48).
func BenchmarkCallMetrics(b *testing.B) {
	lat := []time.Duration{80 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond}
	b.Run("callCounts", func(b *testing.B) {
		c := newCallCounts()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			c.observe(200, lat[i%len(lat)])
		}
	})
	b.Run("client_golang", func(b *testing.B) {
		req := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "r"}, []string{"class"}).WithLabelValues("2xx")
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h", Buckets: latencyBuckets}, nil).WithLabelValues()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			req.Inc()
			h.Observe(lat[i%len(lat)].Seconds())
		}
	})
}
