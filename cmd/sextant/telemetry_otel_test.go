package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// istioOTelLogging is Istio's own sample (samples/open-telemetry/loki/
// telemetry.yaml): the mesh's access logs through the otel provider.
const istioOTelLogging = `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata:
  name: mesh-logging
  namespace: istio-system
spec:
  accessLogging:
    - providers:
        - name: otel
`

// TestTelemetryOTelAccessLog: with Istio's sample applied, the gateway
// sends each call's access log line as an OTLP log record to a real
// collector (Jaeger v2, an OpenTelemetry collector distribution, whose
// debug exporter prints what it received), and counts what it exported.
func TestTelemetryOTelAccessLog(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: Jaeger, server and gateway")
	}
	j := startJaeger(t)
	up := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "orders") })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	api, proxy, admin, server := startMeshWith(t, "", 10*time.Second, func(f *gatewayFlags, _ string) {
		f.accessLogOTLP, f.accessLogOTLPProt = j.otlpGRPC, "grpc"
	})
	if _, err := api.Register(context.Background(), client.Instance{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(proxy)
	var p int
	fmt.Sscan(port, &p)
	if out, err := runOn(t, server, fmt.Sprintf(telemetryRouting, p)+"---\n"+istioOTelLogging, "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	// Each round calls a new path until its record arrives: the first
	// calls may come before the Telemetry reached the gateway.
	var path string
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		path = fmt.Sprintf("/otel/%d", i)
		code, err := shopCallPath(proxy, path)
		if err == nil && code == 200 {
			wait := time.Now().Add(5 * time.Second)
			for time.Now().Before(wait) && !strings.Contains(j.out.String(), `"GET `+path+` HTTP/1.1" 200`) {
				time.Sleep(100 * time.Millisecond)
			}
			if strings.Contains(j.out.String(), `"GET `+path+` HTTP/1.1" 200`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of %s at the collector in 60s (last call: %d %v); its output:\n%s", path, code, err, j.out.String())
		}
	}
	out := j.out.String()
	for _, want := range []string{"otel_envoy_accesslog", "SeverityText: INFO", "service.name: Str(sextant-gateway)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the collector's output has no %q:\n%s", want, out)
		}
	}
	// The exporter counts a batch once the collector's answer is back,
	// which comes after the collector printed it.
	eventually(t, "sextant_gateway_access_log_otlp_records_exported_total >= 1", func() bool {
		return metricValue(t, admin, "sextant_gateway_access_log_otlp_records_exported_total") >= 1
	})
}
