package trace

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// The gateway's headers are fasthttp's: the benchmarks read and write
// those, as a call does.

func BenchmarkExtractW3C(b *testing.B) {
	var h fasthttp.RequestHeader
	h.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.Set("Tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Extract(&h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExtractB3Multi(b *testing.B) {
	var h fasthttp.RequestHeader
	h.Set("X-B3-TraceId", "4bf92f3577b34da6a3ce929d0e0e4736")
	h.Set("X-B3-SpanId", "00f067aa0ba902b7")
	h.Set("X-B3-Sampled", "1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Extract(&h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExtractNone is a call without trace headers.
func BenchmarkExtractNone(b *testing.B) {
	var h fasthttp.RequestHeader
	h.Set("Accept", "*/*")
	b.ReportAllocs()
	for b.Loop() {
		Extract(&h)
	}
}

func BenchmarkInjectW3C(b *testing.B) {
	var h fasthttp.RequestHeader
	o := Outgoing{TraceID: NewTraceID(), Span: NewSpanID(), Sampled: true}
	b.ReportAllocs()
	for b.Loop() {
		Inject(&h, &o)
	}
}

func BenchmarkInjectB3Multi(b *testing.B) {
	var h fasthttp.RequestHeader
	o := Outgoing{TraceID: NewTraceID(), Span: NewSpanID(), Parent: NewSpanID(), Sampled: true, Formats: B3Multi}
	b.ReportAllocs()
	for b.Loop() {
		Inject(&h, &o)
	}
}

// BenchmarkEncodeSpan is the exporter's CPU per span: encoding one span of
// the gateway's shape into a batch of 512.
func BenchmarkEncodeSpan(b *testing.B) {
	e := newEncoder("sextant-gateway", nil)
	batch := make([]Span, 512)
	for i := range batch {
		batch[i] = testSpan(i)
		batch[i].Add(String("http.url", "http://orders.default.svc:8080/v1/orders/42"))
		batch[i].Add(String("upstream_cluster", "outbound|8080||orders.default.svc.cluster.local"))
		batch[i].Add(String("node_id", "gw-1"))
	}
	b.ReportAllocs()
	for b.Loop() {
		e.Request(batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/span")
}
