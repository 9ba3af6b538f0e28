package consulapi_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// FuzzKVRequest: any KV request (method, key, query, body) answers
// without a server error, and a put answered true is read back as put.
func FuzzKVRequest(f *testing.F) {
	s := newKVStack(f, acl.Options{}, "default")
	f.Add(uint8(0), "a/b", "flags=3", []byte("value"))
	f.Add(uint8(0), "a/b", "cas=0", []byte(""))
	f.Add(uint8(1), "a/", "recurse&index=1&wait=1ms", []byte(nil))
	f.Add(uint8(1), "", "keys&separator=/", []byte(nil))
	f.Add(uint8(2), "a", "recurse", []byte(nil))
	f.Add(uint8(0), "ü/\x00", "flags=-1&cas=x", []byte("x"))
	f.Fuzz(func(t *testing.T, m uint8, key, query string, body []byte) {
		if len(body) > 4096 {
			body = body[:4096]
		}
		q, _ := url.ParseQuery(query)
		q.Set("wait", "1ms") // a blocking read never holds the fuzzer
		method := []string{"PUT", "GET", "DELETE"}[m%3]
		target := (&url.URL{Path: "/v1/kv/" + key, RawQuery: q.Encode()}).String()
		req, err := http.NewRequest(method, target, bytes.NewReader(body))
		if err != nil {
			return
		}
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %s: %d %s", method, target, w.Code, w.Body)
		}
		if method != "PUT" || w.Code != 200 || w.Body.String() != "true" {
			return
		}
		get := httptest.NewRequest("GET", (&url.URL{Path: "/v1/kv/" + key, RawQuery: "raw"}).String(), nil)
		w = httptest.NewRecorder()
		s.api.ServeHTTP(w, get)
		if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), body) {
			t.Fatalf("put %q (query %q) answered true; read back %d %q, want %q", key, query, w.Code, w.Body, body)
		}
	})
}
