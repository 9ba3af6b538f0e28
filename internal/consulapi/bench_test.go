package consulapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// BenchmarkRegister: one Consul register through the handler (a new
// instance each time, so each is a durable write of the registry).
func BenchmarkRegister(b *testing.B) {
	s := newStack(b, acl.Options{}, "default")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		body := `{"ID":"w-` + strconv.Itoa(i) + `","Name":"web","Tags":["primary","v1"],"Address":"10.0.0.1","Port":8080,"Meta":{"env":"prod"}}`
		req := httptest.NewRequest("PUT", "/v1/agent/service/register", strings.NewReader(body))
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkHealthServicePassing and BenchmarkCatalogService: one read of
// a service of 100 instances through the handler.
func BenchmarkHealthServicePassing(b *testing.B) {
	benchRead(b, "/v1/health/service/web?passing")
}

func BenchmarkCatalogService(b *testing.B) {
	benchRead(b, "/v1/catalog/service/web")
}

func benchRead(b *testing.B, path string) {
	s := newStack(b, acl.Options{}, "default")
	for i := range 100 {
		body := fmt.Sprintf(`{"ID":"w-%d","Name":"web","Tags":["primary","v1"],"Address":"10.0.%d.%d","Port":8080,"Meta":{"env":"prod","zone":"z%d"}}`, i, i/256, i%256, i%3)
		req := httptest.NewRequest("PUT", "/v1/agent/service/register", strings.NewReader(body))
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("GET", path, nil)
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code != http.StatusOK || w.Body.Len() < 100*200 {
			b.Fatalf("%d %d bytes", w.Code, w.Body.Len())
		}
	}
}
