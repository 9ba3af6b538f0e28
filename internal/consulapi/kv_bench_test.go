package consulapi_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// BenchmarkKVPut: one Consul KV put of a 100-byte value through the
// handler, each to a new key: a durable write of the KV kind (compare
// BenchmarkRegister, an instance write, in the same run).
func BenchmarkKVPut(b *testing.B) {
	s := newKVStack(b, acl.Options{}, "default")
	value := strings.Repeat("v", 100)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req := httptest.NewRequest("PUT", "/v1/kv/app/config/key-"+strconv.Itoa(i), strings.NewReader(value))
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code != http.StatusOK || w.Body.String() != "true" {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkKVGet: one Consul KV get of a 100-byte value among 10,000 keys
// through the handler (compare BenchmarkCatalogService in the same run).
func BenchmarkKVGet(b *testing.B) {
	s := newKVStack(b, acl.Options{}, "default")
	value := strings.Repeat("v", 100)
	for i := range 10000 {
		req := httptest.NewRequest("PUT", "/v1/kv/app/config/key-"+strconv.Itoa(i), strings.NewReader(value))
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req := httptest.NewRequest("GET", "/v1/kv/app/config/key-"+strconv.Itoa(i%10000), nil)
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code != http.StatusOK || w.Body.Len() < 100 {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}
