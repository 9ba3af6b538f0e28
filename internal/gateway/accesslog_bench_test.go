package gateway_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sextant-mesh/sextant/internal/accesslog"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

// BenchmarkProxyAccessLog is BenchmarkProxy with access logs off, and on
// for every call in Istio's text and JSON formats, in one run: the lines
// go to a file (rotated at 64 MB) through the writer's goroutine, so
// the formatting on the call's goroutine and the writing beside it both
// count. Compare the sub-benchmarks' ns/op against "off" of the same run;
// lines/op and dropped/op say what the writer did.
func BenchmarkProxyAccessLog(b *testing.B) {
	for _, mode := range []struct {
		name string
		enc  accesslog.Encoding
		on   bool
	}{{"off", 0, false}, {"text", accesslog.Text, true}, {"json", accesslog.JSON, true}} {
		b.Run(mode.name, func(b *testing.B) {
			var opts gateway.Options
			var w *accesslog.Writer
			if mode.on {
				var err error
				w, err = accesslog.Open(accesslog.Options{Path: filepath.Join(b.TempDir(), "access.log"), MaxBytes: 64 << 20, Keep: 1})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { w.Run(ctx); close(done) }()
				defer func() { cancel(); <-done }()
				opts.AccessLog = &gateway.AccessLog{Sink: w, All: true, Encoding: mode.enc}
			}
			benchProxyWith(b, opts)
			if w != nil {
				st := w.Stats()
				b.ReportMetric(float64(st.Written+st.Dropped)/float64(b.N), "lines/op")
				b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
			}
		})
	}
}
