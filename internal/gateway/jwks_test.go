package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/jwt"
)

// TestJWKSCacheRefresh: keys are fetched in the background (the first
// call gets none, never waits), used for the source's cache duration, then
// fetched again, so a rotated key set arrives; a source the config no
// longer names is dropped; after close no fetch starts.
func TestJWKSCacheRefresh(t *testing.T) {
	a, b := newBenchSigner(t, "ES256"), newBenchSigner(t, "RS256")
	var doc atomic.Value
	doc.Store(a.jwks)
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		w.Write([]byte(doc.Load().(string)))
	}))
	defer srv.Close()
	c := newJWKSCache(nil)
	src := &jwksSource{uri: srv.URL, timeout: time.Second, cache: time.Second}
	if ks := c.keys(src); ks != nil {
		t.Fatal("keys before any fetch")
	}
	ready := func(want string) *jwt.KeySet {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if ks := c.keys(src); ks != nil {
				tok, err := jwt.Parse(map[string]*benchSigner{"ES256": a, "RS256": b}[want].token(t, map[string]any{"iss": "i"}))
				if err != nil {
					t.Fatal(err)
				}
				if tok.Verify(ks, time.Now(), 0, nil) == nil {
					return ks
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no %s keys within 10s (%d fetches)", want, fetches.Load())
		return nil
	}
	ready("ES256")
	n := fetches.Load()
	for range 50 {
		c.keys(src) // within the cache duration: no new fetch
	}
	if fetches.Load() != n {
		t.Fatalf("%d fetches within the cache duration, want %d", fetches.Load(), n)
	}
	doc.Store(b.jwks) // the issuer rotates its key
	ready("RS256")
	c.prefetch(nil) // the config no longer names it
	c.mu.Lock()
	left := len(c.entries)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d entries kept", left)
	}
	c.close()
	n = fetches.Load()
	c.keys(src)
	time.Sleep(100 * time.Millisecond)
	if fetches.Load() != n {
		t.Fatal("a fetch after close")
	}
}
