package sidecar_test

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// TestSidecarTracing: two sidecars started with --tracing-* export the
// spans of a traced call, each under its workload's service name (Istio's
// NAME.NAMESPACE), in the caller's trace. The collector here is a stand-in
// that keeps the OTLP/HTTP bodies and looks for the trace id's bytes and
// the names in them: that Sextant's exporter is read by a real Jaeger is
// cmd/sextant's TestTracingJaeger.
func TestSidecarTracing(t *testing.T) {
	python, err := debian.Ensure("python3", "python3")
	if err != nil {
		t.Fatal(err)
	}
	curlBin, err := debian.Ensure("curl", "curl")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var bodies [][]byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			bodies = append(bodies, b)
			mu.Unlock()
		}
	}))
	defer collector.Close()
	tracing := []string{"--tracing-otlp-endpoint", collector.URL, "--tracing-otlp-protocol", "http", "--tracing-sampling", "0"}

	m := startServer(t)
	port, _ := startApp(t, python, "orders-v1")
	m.startWorkload(t, "shop/orders", port, []string{"app=orders"}, tracing...)
	web := m.startWorkload(t, "shop/web", "", []string{"app=web"}, tracing...)
	waitTrue(t, 30*time.Second, "web's call to orders", func() bool {
		out, err := curl(t, curlBin, "-x", "http://"+web.outbound, "http://orders.shop:8080/")
		return err == nil && strings.HasPrefix(out, "orders-v1")
	})
	const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	if out, err := curl(t, curlBin, "-x", "http://"+web.outbound, "-H", "traceparent: 00-"+tid+"-00f067aa0ba902b7-01",
		"http://orders.shop:8080/"); err != nil || !strings.HasPrefix(out, "orders-v1") {
		t.Fatalf("traced call: %q %v", out, err)
	}
	id, _ := hex.DecodeString(tid)
	waitTrue(t, 15*time.Second, "both sidecars' spans of the traced call", func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, b := range bodies {
			if !bytes.Contains(b, id) {
				continue
			}
			for _, name := range []string{"web.shop", "orders.shop"} {
				if bytes.Contains(b, []byte(name)) {
					seen[name] = true
				}
			}
		}
		return seen["web.shop"] && seen["orders.shop"]
	})
}
