package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// discardWriter is the smallest http.ResponseWriter: what the handler
// costs, without a recorder's own copies.
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }

// BenchmarkRegisterOne is one single-instance register through the API's
// handler (routing, guard, body, decode, commit, answer), from 16
// goroutines per core so that group commit shares fsyncs as under load.
// The request objects are the loader's; allocs/op is the server side plus
// one bytes.Reader.
func BenchmarkRegisterOne(b *testing.B) {
	st, err := embedded.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	reg, err := registry.Open(st, registry.Options{})
	if err != nil {
		b.Fatal(err)
	}
	api := New(Options{})
	api.SetRegistry(reg)
	b.Cleanup(func() { api.Shutdown(); reg.Close(); st.Close() })
	var md []string
	for j := 1; j <= 16; j++ {
		md = append(md, fmt.Sprintf(`"meta-key%02d":"v%02d-000000"`, j, j))
	}
	tmpl := `{"id":"bench-%010d","service":"reg-%d","host":"10.0.0.1","port":8080,"protocol":"http","version":"v1","weight":100,"metadata":{` +
		strings.Join(md, ",") + `}}`
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, _ := http.NewRequest("POST", "/v1/instances", nil)
		req.Header.Set("Content-Type", "application/json")
		var body bytes.Reader
		w := &discardWriter{h: http.Header{}}
		buf := []byte(fmt.Sprintf(tmpl, 0, 0))
		if !bytes.HasPrefix(buf[7:], []byte("bench-0000000000")) {
			b.Fatalf("template moved: %s", buf)
		}
		for pb.Next() {
			n := next.Add(1)
			for i, v := 22, n; i >= 13; i, v = i-1, v/10 { // the id's digits
				buf[i] = byte('0' + v%10)
			}
			body.Reset(buf)
			r := *req
			r.Body = readCloser{&body}
			r.ContentLength = int64(len(buf))
			clear(w.h)
			w.code = 0
			api.ServeHTTP(w, &r)
			if w.code != 0 && w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
	})
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }
