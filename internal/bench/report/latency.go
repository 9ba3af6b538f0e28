package report

import (
	"math"
	"slices"
	"time"
)

// Summary is a latency distribution in milliseconds, rounded to the
// microsecond. A result type may embed it or copy the figures it prints.
type Summary struct {
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Summarize sorts lat in place and returns its percentiles; all zero when
// lat is empty.
func Summarize(lat []time.Duration) Summary {
	if len(lat) == 0 {
		return Summary{}
	}
	slices.Sort(lat)
	return Summary{
		P50Ms:  Ms(Quantile(lat, 0.50)),
		P99Ms:  Ms(Quantile(lat, 0.99)),
		P999Ms: Ms(Quantile(lat, 0.999)),
		MaxMs:  Ms(lat[len(lat)-1]),
	}
}

// Quantile is the q-quantile (0 <= q <= 1) of sorted latencies: the sample
// at rank floor(q*(n-1)), never interpolated, so every figure printed was a
// real latency. Zero when sorted is empty.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Ms is d in milliseconds rounded to the microsecond.
func Ms(d time.Duration) float64 { return Round3(float64(d) / 1e6) }

// Round3 rounds x to three decimals, half away from zero: figures print
// without float noise.
func Round3(x float64) float64 { return math.Round(x*1000) / 1000 }
