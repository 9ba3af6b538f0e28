package gateway

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/accesslog"
)

type discardSink struct{ buf []byte }

func (s *discardSink) Line() *[]byte  { s.buf = s.buf[:0]; return &s.buf }
func (s *discardSink) Submit(*[]byte) {}

// BenchmarkAccessLogCall is the access log's cost on a call's goroutine:
// the line of a proxied call built from its request and formatted (text,
// JSON), as finish does it, into a sink that keeps nothing.
func BenchmarkAccessLogCall(b *testing.B) {
	var ctx fasthttp.RequestCtx
	ctx.Init(&ctx.Request, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 51234}, nil)
	ctx.Request.Header.SetMethod("GET")
	ctx.Request.SetRequestURI("/orders/7?x=1")
	ctx.Request.Header.SetHost("shop.example.com")
	ctx.Request.Header.Set("User-Agent", "curl/8.5.0")
	ctx.Request.Header.Set("X-Request-Id", "45fa60bbf5f37fd195fc313b7eef6aac")
	ctx.Request.Header.Set("X-Forwarded-For", "10.0.0.9")
	ctx.Response.SetBodyString("ok")
	k := &call{c: &clusterRT{name: "outbound|80||orders.default"}, status: 200, endpoint: "127.0.0.1:9001", upLat: 2 * time.Millisecond}
	start := time.Now()
	for _, enc := range []accesslog.Encoding{accesslog.Text, accesslog.JSON} {
		b.Run(enc.String(), func(b *testing.B) {
			sink := &discardSink{buf: make([]byte, 0, 1024)}
			g := &Gateway{opts: Options{AccessLog: &AccessLog{Sink: sink}}}
			logs := []accessLogSpec{{enc: enc}}
			b.ReportAllocs()
			for b.Loop() {
				g.logAccess(&ctx, logs, k, "orders", start, 3*time.Millisecond, -1)
			}
		})
	}
}

type discardExporter struct{ discardSink }

func (x *discardExporter) Export(*[]byte, time.Time) {}

// TestEffectiveLogsWithoutCollector: a listener's otel access log is
// kept only when the gateway has an OTLP exporter; its other logs stay.
func TestEffectiveLogsWithoutCollector(t *testing.T) {
	lt := &listenerTelemetry{logsSet: true, logs: []accessLogSpec{{enc: accesslog.OTel}, {enc: accesslog.Text}}}
	got := effectiveLogs(&AccessLog{Sink: &discardSink{}}, lt)
	if len(got) != 1 || got[0].enc != accesslog.Text {
		t.Fatalf("without an exporter: %v, want the text log only", got)
	}
	got = effectiveLogs(&AccessLog{Sink: &discardSink{}, OTel: &discardExporter{}}, lt)
	if len(got) != 2 || got[0].enc != accesslog.OTel {
		t.Fatalf("with an exporter: %v, want both", got)
	}
}
