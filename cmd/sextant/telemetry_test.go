package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// telemetryRouting routes shop.example.com to orders through a Gateway of
// the ingress gateway's labels.
const telemetryRouting = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: http, protocol: HTTP}
    hosts: [shop.example.com]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop}
spec:
  hosts: [shop.example.com]
  gateways: [shop-gw]
  http:
  - route: [{destination: {host: orders}}]
`

// The gateway's Telemetry: Envoy's text access log of failed calls, and
// not the mesh's JSON one (providers merge one by one, as in Istio).
const telemetryFailures = `apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: shop-gw-logs}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  accessLogging:
  - providers: [{name: envoy}]
    filter: {expression: response.code >= 500}
  - providers: [{name: envoy-json}]
    disabled: true
`

// The mesh's (v1alpha1, as older Istio writes it): Istio's JSON of every call.
const telemetryMeshJSON = `apiVersion: telemetry.istio.io/v1alpha1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  accessLogging:
  - providers: [{name: envoy-json}]
`

// TestTelemetryAccessLogs: Telemetry objects applied with sextant config
// apply reach the running gateway over xDS: its access log file gets
// Istio's text lines of the calls the workload's filter selects, then,
// once that Telemetry is deleted, the mesh's JSON lines of every call; the
// file rotates at --access-log-max-bytes keeping --access-log-keep files.
func TestTelemetryAccessLogs(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "access.log")
	up := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/fail") {
			w.WriteHeader(503)
		}
		io.WriteString(w, "orders")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	api, proxy, admin, server := startMeshWith(t, "", 10*time.Second, func(f *gatewayFlags, _ string) {
		f.accessLogFile, f.accessLogMaxBytes, f.accessLogKeep = logFile, 20000, 2
	})
	if _, err := api.Register(context.Background(), client.Instance{ID: "o1", Service: "orders", Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(proxy)
	var p int
	fmt.Sscan(port, &p)
	if out, err := runOn(t, server, fmt.Sprintf(telemetryRouting, p)+"---\n"+telemetryFailures+"---\n"+telemetryMeshJSON, "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	call := func(path string) int {
		code, _ := shopCallPath(proxy, path)
		return code
	}
	waitTrue(t, 15*time.Second, func() bool { return call("/ready") == 200 })
	read := func() []string {
		b, _ := os.ReadFile(logFile)
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	// The workload's Telemetry overrides the mesh's: only failures, in text.
	waitTrue(t, 10*time.Second, func() bool {
		call("/ok")
		call("/fail/1")
		lines := read()
		return strings.Contains(lines[len(lines)-1], `"GET /fail/1 HTTP/1.1" 503 - via_upstream`)
	})
	// (Lines before may be the mesh's alone: calls served while the
	// Gateway's listener was on its way.) Lines reach the file within
	// the writer's flush interval: wait for it to stay put.
	settled := func() []string {
		prev := read()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			time.Sleep(300 * time.Millisecond)
			cur := read()
			if len(cur) == len(prev) {
				return cur
			}
			prev = cur
		}
		t.Fatal("the access log kept growing")
		return nil
	}
	n := len(settled())
	c1, c2 := call("/ok"), call("/fail/2")
	lines := settled()
	if c1 != 200 || c2 != 503 || len(lines) < n {
		t.Fatalf("calls %d %d; %d lines, were %d", c1, c2, len(lines), n)
	}
	if lines := lines[n:]; len(lines) != 1 || !strings.Contains(lines[0], `"GET /fail/2 HTTP/1.1" 503 - via_upstream - "-" 0 6 `) ||
		!strings.Contains(lines[0], `"Go-http-client/1.1"`) || !strings.Contains(lines[0], `"shop.example.com" "127.0.0.1:`) {
		t.Errorf("want the 503's text line only: %q", lines)
	}
	// Delete it: the mesh's JSON of every call, live.
	if out, err := runOn(t, server, "", "config", "delete", "telemetry/default/shop-gw-logs"); err != nil {
		t.Fatalf("config delete: %v\n%s", err, out)
	}
	waitTrue(t, 10*time.Second, func() bool {
		call("/ok/json")
		lines := read()
		var j map[string]any
		return json.Unmarshal([]byte(lines[len(lines)-1]), &j) == nil && j["path"] == "/ok/json" && j["response_code"] == 200.0 &&
			j["authority"] == "shop.example.com" && j["upstream_cluster"] != nil
	})
	// Rotation: 20,000 bytes a file (about 27 JSON lines), two kept.
	for i := 0; i < 100; i++ {
		call(fmt.Sprintf("/ok/%d", i))
	}
	waitTrue(t, 10*time.Second, func() bool {
		_, err1 := os.Stat(logFile + ".1")
		_, err2 := os.Stat(logFile + ".2")
		_, err3 := os.Stat(logFile + ".3")
		return err1 == nil && err2 == nil && os.IsNotExist(err3)
	})
	if v := metricValue(t, admin, "sextant_gateway_access_log_rotations_total"); v < 2 {
		t.Errorf("rotations %v", v)
	}
	if v := metricValue(t, admin, "sextant_gateway_access_log_lines_total"); v < 100 {
		t.Errorf("lines %v", v)
	}
}

func shopCallPath(proxy, path string) (int, error) {
	req, _ := http.NewRequest("GET", "http://"+proxy+path, nil)
	req.Host = "shop.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Bad access log flags are refused before the gateway starts, naming the
// flag.
func TestGatewayAccessLogFlagsRefused(t *testing.T) {
	base := gatewayFlags{listen: "127.0.0.1:0", logFormat: "text", logLevel: "error", noRecords: true}
	for _, c := range []struct {
		set  func(*gatewayFlags)
		want string
	}{
		{func(f *gatewayFlags) { f.accessLog = "xml" }, `--access-log "xml": want text or json`},
		{func(f *gatewayFlags) { f.accessLogMaxBytes = -1 }, "--access-log-max-bytes -1"},
		{func(f *gatewayFlags) { f.accessLogFile = filepath.Join(t.TempDir(), "no", "dir", "a.log") }, "--access-log-file"},
	} {
		f := base
		c.set(&f)
		err := runGateway(context.Background(), f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
