package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// BenchmarkQueryACL is one service query (100 instances, 16 metadata each,
// a 2-term selector) through the whole handler, in process, with ACLs off
// and on (a token with a namespace rule; with rate limits and the audit).
// The answer is memoised, so the figure is the request's fixed cost: what
// the guard adds shows here at its largest share.
func BenchmarkQueryACL(b *testing.B) {
	for _, mode := range []string{"off", "on", "on+limits+audit"} {
		b.Run(mode, func(b *testing.B) {
			opts := acl.Options{Enabled: mode != "off"}
			if mode == "on+limits+audit" {
				opts.WriteRate = acl.Rate{PerSecond: 1e9, Burst: 1 << 30}
				opts.ReadRate = opts.WriteRate
				opts.Audit = slog.New(acl.NewAuditHandler(bufio.NewWriterSize(io.Discard, 1<<16)))
			}
			api, token := benchAPI(b, opts)
			var body strings.Builder
			body.WriteString(`{"instances":[`)
			for i := range 100 {
				if i > 0 {
					body.WriteByte(',')
				}
				md := map[string]string{}
				for j := range 16 {
					md[fmt.Sprintf("meta-key%02d", j)] = fmt.Sprintf("v%02d-%06d", j, i%(1<<(j%8+1)))
				}
				m, _ := json.Marshal(md)
				fmt.Fprintf(&body, `{"namespace":"orders","service":"q","host":"10.0.0.%d","port":80,"metadata":%s}`, i+1, m)
			}
			body.WriteString(`]}`)
			w := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "/v1/instances", strings.NewReader(body.String()))
			req.Header.Set("Authorization", "Bearer "+token)
			api.ServeHTTP(w, req)
			if w.Code != 200 {
				b.Fatalf("register: %d %s", w.Code, w.Body)
			}
			get := httptest.NewRequest("GET", "/v1/namespaces/orders/services/q/instances?selector=meta-key01%3Dv01-000001,meta-key02!%3Dv02-000000", nil)
			get.Header.Set("Authorization", "Bearer "+token)
			rec := &discardRecorder{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				clear(rec.h)
				rec.code = 0
				api.ServeHTTP(rec, get)
				if rec.code != 0 && rec.code != 200 {
					b.Fatalf("query: %d", rec.code)
				}
			}
		})
	}
}

type discardRecorder struct {
	h    http.Header
	code int
}

func (r *discardRecorder) Header() http.Header         { return r.h }
func (r *discardRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *discardRecorder) WriteHeader(code int)        { r.code = code }

// benchAPI is the real stack in process; with ACLs on it returns a token
// that may write namespace orders.
func benchAPI(b *testing.B, opts acl.Options) (*API, string) {
	st, err := embedded.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	g := acl.New(opts)
	reg, err := registry.Open(st, registry.Options{Engine: commit.Options{Tables: g.Tables()}})
	if err != nil {
		b.Fatal(err)
	}
	api := New(Options{ACL: g})
	api.SetRegistry(reg)
	b.Cleanup(func() { api.Shutdown(); reg.Close(); st.Close() })
	if !opts.Enabled {
		return api, ""
	}
	ctx := context.Background()
	if _, err := g.PutPolicy(ctx, reg.Engine(), &acl.Policy{Name: "w", Rules: []acl.Rule{mustRule(b, "orders:instances=write"), mustRule(b, "team-*:config=read")}}, true); err != nil {
		b.Fatal(err)
	}
	_, secret, err := g.CreateToken(ctx, reg.Engine(), &acl.TokenRequest{Policies: []string{"w"}})
	if err != nil {
		b.Fatal(err)
	}
	return api, secret
}

func mustRule(b testing.TB, s string) acl.Rule {
	r, err := acl.ParseRule(s)
	if err != nil {
		b.Fatal(err)
	}
	return r
}
