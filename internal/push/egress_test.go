package push_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/gateway/gatewaytest"
)

// TestEgressServiceEntry is Istio's egress tasks ("Accessing External
// Services", "Egress traffic control: timeouts") through the real server
// and gateway: an external service, played by a loopback server, is
// reached through the gateway only once a ServiceEntry names it, by a
// STATIC entry's address (EDS) and by a DNS entry's host name, which the
// gateway resolves itself (localhost); a VirtualService on the entry's
// host sets a timeout that the gateway enforces (504); deleting the entry
// refuses the calls again.
func TestEgressServiceEntry(t *testing.T) {
	ignore := []goleak.Option{goleak.IgnoreCurrent(),
		// fasthttp's process-wide goroutines, and those that outlive a
		// stopped server or pool by their sleep (the gateway's own,
		// the DNS refresh loop included, are checked).
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	}
	t.Cleanup(func() { goleak.VerifyNone(t, ignore...) })
	var reached atomic.Int64
	ext := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if d, err := time.ParseDuration(strings.TrimPrefix(r.URL.Path, "/delay/")); err == nil {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "external %s", r.Host)
	}))
	defer ext.Close()
	port := ext.Listener.Addr().(*net.TCPAddr).Port
	s := startServerStack(t)
	proxy := gatewaytest.Start(t, s.addr, "egress-gateway")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	call := func(host, path string) (int, string) {
		req, _ := http.NewRequest("GET", proxy+path, nil)
		req.Host = host
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("call %s%s: %v", host, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ctx := context.Background()
	// Before any ServiceEntry: the gateway knows no such service.
	if code, body := call("localhost", "/"); code == 200 || reached.Load() != 0 {
		t.Fatalf("without a ServiceEntry: %d %q (reached %d times); want refused", code, body, reached.Load())
	}
	entries := fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-static}
spec:
  hosts: [api.external.example]
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: %d}]
  location: MESH_EXTERNAL
  resolution: STATIC
  endpoints: [{address: 127.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-dns}
spec:
  hosts: [localhost]
  ports: [{number: %d, name: http, protocol: HTTP}]
  location: MESH_EXTERNAL
  resolution: DNS
`, port, port)
	if _, err := s.api.ApplyConfig(ctx, []byte(entries), false); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"api.external.example", "localhost"} {
		waitFor(t, func() bool { code, _ := call(host, "/"); return code == 200 })
		if code, body := call(host, "/hello"); code != 200 || body != "external "+host {
			t.Fatalf("%s through the gateway: %d %q", host, code, body)
		}
	}
	// A VirtualService on the external host: a 1s timeout, as the task's
	// 3s on httpbin.org's /delay/5.
	vs := `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ext-timeout}
spec:
  hosts: [localhost]
  http:
  - timeout: 1s
    route: [{destination: {host: localhost, port: {number: ` + strconv.Itoa(port) + `}}}]
`
	res, err := s.api.ApplyConfig(ctx, []byte(vs), false)
	if err != nil {
		t.Fatal(err)
	}
	// The host has no instances, but an entry names it: no warning.
	if w := res.Results[0].Warnings; len(w) != 0 {
		t.Fatalf("warnings for a VirtualService on a ServiceEntry's host: %v", w)
	}
	var took time.Duration
	waitFor(t, func() bool {
		start := time.Now()
		code, _ := call("localhost", "/delay/3s")
		took = time.Since(start)
		return code == http.StatusGatewayTimeout
	})
	if took < 900*time.Millisecond || took > 2500*time.Millisecond {
		t.Fatalf("timed out after %v, want about 1s", took)
	}
	if code, _ := call("localhost", "/delay/10ms"); code != 200 {
		t.Fatalf("within the timeout: %d", code)
	}
	// Istio's egress TLS origination: the entry's port 443 reaches a TLS
	// server, and a DestinationRule's portLevelSettings make the gateway
	// originate TLS on it, for a plaintext caller.
	var sawTLS atomic.Bool
	tlsExt := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawTLS.Store(r.TLS != nil)
		fmt.Fprint(w, "external over TLS")
	}))
	tlsExt.Config.ErrorLog = log.New(io.Discard, "", 0) // the plaintext calls below
	tlsExt.StartTLS()
	defer tlsExt.Close()
	tlsPort := tlsExt.Listener.Addr().(*net.TCPAddr).Port
	origination := fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext-tls}
spec:
  hosts: [secure.external.example]
  ports:
  - {number: 80, name: http, protocol: HTTP, targetPort: %d}
  - {number: 443, name: https, protocol: HTTPS, targetPort: %d}
  resolution: STATIC
  endpoints: [{address: 127.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ext-tls}
spec:
  hosts: [secure.external.example]
  http:
  - route: [{destination: {host: secure.external.example, port: {number: 443}}}]
`, tlsPort, tlsPort)
	if _, err := s.api.ApplyConfig(ctx, []byte(origination), false); err != nil {
		t.Fatal(err)
	}
	// Plaintext to a TLS port: the server refuses it (400).
	waitFor(t, func() bool { code, _ := call("secure.external.example", "/"); return code == http.StatusBadRequest })
	const dr = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ext-tls}
spec:
  host: secure.external.example
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN}
    portLevelSettings:
    - port: {number: 443}
      tls: {mode: SIMPLE, insecureSkipVerify: true}
`
	if _, err := s.api.ApplyConfig(ctx, []byte(dr), false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { code, _ := call("secure.external.example", "/"); return code == 200 })
	if code, body := call("secure.external.example", "/"); code != 200 || body != "external over TLS" || !sawTLS.Load() {
		t.Fatalf("TLS origination: %d %q (TLS %v)", code, body, sawTLS.Load())
	}
	// The API reads entries by kind name and short name.
	for _, kind := range []string{"se", "serviceentries"} {
		if obj, err := s.api.GetConfig(ctx, kind, "default", "ext-dns"); err != nil || !strings.Contains(string(obj), `"kind":"ServiceEntry"`) {
			t.Fatalf("GET config %s/default/ext-dns: %s %v", kind, obj, err)
		}
	}
	// Without the entries, the calls are refused and never reach the host.
	for _, name := range []string{"ext-static", "ext-dns"} {
		if _, err := s.api.DeleteConfig(ctx, "ServiceEntry", "default", name); err != nil {
			t.Fatal(err)
		}
	}
	for _, host := range []string{"api.external.example", "localhost"} {
		waitFor(t, func() bool { code, _ := call(host, "/"); return code != 200 })
		before := reached.Load()
		if code, body := call(host, "/"); code == 200 || reached.Load() != before {
			t.Fatalf("%s after deleting its ServiceEntry: %d %q; want refused", host, code, body)
		}
	}
}
