// Package sidecar_test runs Sextant's sidecar as users run it: the real
// sextant binary (server and one sidecar per workload, as processes)
// beside programs that know nothing of the mesh, Python's http.server and
// curl from Debian. It lives apart from cmd/sextant so that its processes
// do not weigh on that package's time budget.
package sidecar_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// appPy is a plain Python HTTP server: it answers its name, after a
// second for /slow.
const appPy = `import http.server, sys, time
name = sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/slow"):
            print("slow call started", flush=True)
            time.sleep(1.5)
        b = (name + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

const meshConfig = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: shop}
spec:
  hosts: [orders]
  http:
  - match: [{headers: {x-canary: {exact: "yes"}}}]
    route: [{destination: {host: orders, subset: v2}}]
  - route:
    - {destination: {host: orders, subset: v1}, weight: 50}
    - {destination: {host: orders, subset: v2}, weight: 50}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: shop}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: orders, namespace: shop}
spec:
  selector: {matchLabels: {app: orders}}
  action: ALLOW
  rules:
  - from: [{source: {principals: [cluster.local/ns/shop/sa/web]}}]
`

// mesh is a running server.
type mesh struct {
	bin, api, xds string
}

func startServer(t *testing.T) *mesh {
	t.Helper()
	m := &mesh{bin: sextantBin(t), api: freeAddr(t), xds: freeAddr(t)}
	p := start(t, "server", m.bin, "server", "--data", t.TempDir(), "--http", m.api, "--xds", m.xds, "--log-level", "warn")
	waitHTTP(t, p, "http://"+m.api+"/readyz")
	return m
}

// sextant runs a sextant client command against the server.
func (m *mesh) sextant(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(m.bin, append(args, "--server", "http://"+m.api)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sextant %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// workload is an app with its sidecar.
type workload struct {
	sidecar               *proc
	mesh, outbound, admin string
}

// startWorkload starts a sidecar for service (NS/NAME) with labels, in
// front of an app on appPort (0: none, a client only).
func (m *mesh) startWorkload(t *testing.T, service string, appPort string, labels []string, extra ...string) *workload {
	t.Helper()
	w := &workload{mesh: freeAddr(t), outbound: freeAddr(t), admin: freeAddr(t)}
	if appPort == "" {
		appPort = "9" // a client's: nothing calls it
	}
	args := []string{"sidecar", "--service", service, "--app-port", appPort, "--mesh-listen", w.mesh, "--outbound", w.outbound,
		"--admin", w.admin, "--data", t.TempDir(), "--xds", m.xds, "--registry", "http://" + m.api, "--drain", "10s"}
	for _, l := range labels {
		args = append(args, "--label", l)
	}
	args = append(args, extra...)
	w.sidecar = start(t, "sidecar "+service+" "+strings.Join(labels, ","), m.bin, args...)
	waitHTTP(t, w.sidecar, "http://"+w.admin+"/readyz")
	return w
}

// startApp starts appPy answering name on a free port, returned.
func startApp(t *testing.T, python, name string) (string, *proc) {
	t.Helper()
	addr := freeAddr(t)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	script := filepath.Join(t.TempDir(), "app.py")
	if err := os.WriteFile(script, []byte(appPy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "app "+name, python, script, port, name)
	waitHTTP(t, p, "http://"+addr+"/")
	return port, p
}

// curl runs Debian's curl through the sidecar's outbound proxy (the
// app's HTTP_PROXY), returning its output and whether it succeeded.
func curl(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"-sS", "--max-time", "10"}, args...)...).CombinedOutput()
	return string(out), err
}

type call struct {
	Status            int    `json:"status"`
	Reason            string `json:"reason"`
	Principal         string `json:"principal"`
	UpstreamPrincipal string `json:"upstream_principal"`
	TLS               bool   `json:"tls"`
	Path              string `json:"path"`
}

// calls reads a sidecar's call records of service.
func (w *workload) calls(t *testing.T, service string) []call {
	t.Helper()
	resp, err := http.Get("http://" + w.admin + "/v1/calls?service=" + service)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct{ Calls []call }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("calls: %v: %s", err, b)
	}
	return out.Calls
}

// TestSidecarsPythonAndCurl: two Python http.servers (orders v1 and v2)
// and curl (web, and batch, a caller the policy does not name), each with
// a sextant sidecar, under STRICT mutual TLS: curl's calls through its
// sidecar's HTTP proxy reach orders over mutual TLS; both sides' call
// records name the other's SPIFFE ID; a plaintext client is refused at
// the mesh port; the AuthorizationPolicy allows web and denies batch;
// routing by header and by weights works for curl's calls; a sidecar
// stopped with SIGTERM finishes the call in flight and deregisters.
func TestSidecarsPythonAndCurl(t *testing.T) {
	python, err := debian.Ensure("python3", "python3")
	if err != nil {
		t.Fatal(err)
	}
	curlBin, err := debian.Ensure("curl", "curl")
	if err != nil {
		t.Fatal(err)
	}
	m := startServer(t)
	m.sextant(t, meshConfig, "config", "apply", "-f", "-")
	port1, app1 := startApp(t, python, "orders-v1")
	port2, app2 := startApp(t, python, "orders-v2")
	v1 := m.startWorkload(t, "shop/orders", port1, []string{"app=orders", "version=v1"}, "--ttl", "1s")
	v2 := m.startWorkload(t, "shop/orders", port2, []string{"app=orders", "version=v2"}, "--ttl", "1s")
	ordersPort := freeAddr(t)
	ordersPort = ordersPort[strings.LastIndexByte(ordersPort, ':')+1:]
	web := m.startWorkload(t, "shop/web", "", []string{"app=web"}, "--outbound-port", "orders.shop="+ordersPort)
	batch := m.startWorkload(t, "shop/batch", "", []string{"app=batch"})

	viaWeb := func(args ...string) (string, error) {
		return curl(t, curlBin, append([]string{"-x", "http://" + web.outbound}, args...)...)
	}
	waitTrue(t, 30*time.Second, "web's call to orders over mutual TLS", func() bool {
		out, err := viaWeb("http://orders.shop:8080/")
		return err == nil && strings.HasPrefix(out, "orders-v")
	})

	t.Run("per-service localhost port", func(t *testing.T) {
		// No proxy setting: 127.0.0.1:PORT stands for orders.shop, and
		// the VirtualService still routes by header.
		for range 5 {
			if out, err := curl(t, curlBin, "-H", "x-canary: yes", "http://127.0.0.1:"+ordersPort+"/"); err != nil || out != "orders-v2\n" {
				t.Fatalf("orders' localhost port with x-canary: yes: %q %v, want orders-v2", out, err)
			}
		}
	})
	t.Run("header routing", func(t *testing.T) {
		for range 10 {
			if out, err := viaWeb("-H", "x-canary: yes", "http://orders.shop:8080/"); err != nil || out != "orders-v2\n" {
				t.Fatalf("x-canary: yes: %q %v, want orders-v2", out, err)
			}
		}
	})
	t.Run("weights", func(t *testing.T) {
		seen := map[string]int{}
		for range 40 {
			out, err := viaWeb("http://orders.shop:8080/")
			if err != nil {
				t.Fatalf("%q %v", out, err)
			}
			seen[strings.TrimSpace(out)]++
		}
		// 50/50 over 40 calls: fewer than 8 of one happens once in 10^5.
		if seen["orders-v1"] < 8 || seen["orders-v2"] < 8 || len(seen) != 2 {
			t.Fatalf("answers %v, want both subsets about half each", seen)
		}
	})
	t.Run("call records name the peer", func(t *testing.T) {
		var sawV1 bool
		for _, c := range web.calls(t, "shop/orders") {
			if c.Status == 200 && c.UpstreamPrincipal != "spiffe://cluster.local/ns/shop/sa/orders" {
				t.Fatalf("web's record of a call to orders: %+v, want the server's SPIFFE ID", c)
			}
		}
		for _, c := range v1.calls(t, "shop/orders") {
			sawV1 = true
			if c.Principal != "spiffe://cluster.local/ns/shop/sa/web" || !c.TLS || c.Status != 200 {
				t.Fatalf("orders-v1's record of web's call: %+v, want web's SPIFFE ID over TLS", c)
			}
		}
		if !sawV1 || len(web.calls(t, "shop/orders")) < 56 {
			t.Fatal("calls missing from the records")
		}
		// Istio's metrics, each side its half as Istio's sidecars: web the
		// source, orders the destination, each naming the other.
		for _, c := range []struct {
			w    *workload
			want []string
		}{
			{web, []string{`reporter="source"`, `source_principal="spiffe://cluster.local/ns/shop/sa/web"`,
				`destination_principal="spiffe://cluster.local/ns/shop/sa/orders"`, `destination_service_name="orders"`}},
			{v1, []string{`reporter="destination"`, `source_principal="spiffe://cluster.local/ns/shop/sa/web"`,
				`destination_principal="spiffe://cluster.local/ns/shop/sa/orders"`, `connection_security_policy="mutual_tls"`}},
		} {
			if line := metricLine(t, c.w, "istio_requests_total{", c.want...); line == "" {
				t.Errorf("%s's /metrics: no istio_requests_total with %v", c.w.sidecar.name, c.want)
			}
		}
	})
	t.Run("STRICT refuses plaintext", func(t *testing.T) {
		if out, err := curl(t, curlBin, "http://"+v1.mesh+"/"); err == nil {
			t.Fatalf("a plaintext call to the mesh port under STRICT: %q, want refused", out)
		}
	})
	t.Run("port-level DISABLE", func(t *testing.T) {
		// orders-v1's mesh port in plaintext: the call reaches the
		// policies (no principal: denied), orders-v2's still refuses it.
		port := v1.mesh[strings.LastIndexByte(v1.mesh, ':')+1:]
		m.sextant(t, fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: orders, namespace: shop}
spec:
  selector: {matchLabels: {app: orders}}
  mtls: {mode: UNSET}
  portLevelMtls:
    %s: {mode: DISABLE}
`, port), "config", "apply", "-f", "-")
		waitTrue(t, 10*time.Second, "plaintext on orders-v1's mesh port", func() bool {
			out, err := curl(t, curlBin, "-w", " %{http_code}", "http://"+v1.mesh+"/")
			return err == nil && out == "RBAC: access denied 403"
		})
		if out, err := curl(t, curlBin, "http://"+v2.mesh+"/"); err == nil {
			t.Fatalf("plaintext to orders-v2 (STRICT): %q, want refused", out)
		}
		m.sextant(t, "", "config", "delete", "peerauthentication/shop/orders")
		waitTrue(t, 10*time.Second, "STRICT again on orders-v1", func() bool {
			_, err := curl(t, curlBin, "http://"+v1.mesh+"/")
			return err != nil
		})
	})
	t.Run("AuthorizationPolicy", func(t *testing.T) {
		out, err := curl(t, curlBin, "-x", "http://"+batch.outbound, "-w", " %{http_code}", "http://orders.shop:8080/")
		if err != nil || out != "RBAC: access denied 403" {
			t.Fatalf("batch's call: %q %v, want 403 RBAC: access denied", out, err)
		}
		waitTrue(t, 5*time.Second, "orders' record of the denial", func() bool {
			for _, w := range []*workload{v1, v2} {
				for _, c := range w.calls(t, "shop/orders") {
					if c.Status == 403 && c.Reason == "rbac_denied" && c.Principal == "spiffe://cluster.local/ns/shop/sa/batch" {
						return true
					}
				}
			}
			return false
		})
	})
	t.Run("an app that stops turns its instance unhealthy", func(t *testing.T) {
		// No heartbeat while the app refuses connections: the registry
		// turns the instance unhealthy after 3 TTLs (1 s here).
		status := func(mesh string) string {
			for _, l := range strings.Split(m.sextant(t, "", "instances", "list", "--namespace", "shop", "--service", "orders"), "\n") {
				if strings.Contains(l, mesh) {
					for _, f := range strings.Fields(l) {
						if f == "healthy" || f == "unhealthy" {
							return f
						}
					}
				}
			}
			return ""
		}
		if st := status(v1.mesh); st != "healthy" {
			t.Fatalf("orders-v1 before its app stops: %q", st)
		}
		app1.stop()
		waitTrue(t, 15*time.Second, "orders-v1 unhealthy", func() bool { return status(v1.mesh) == "unhealthy" })
		if st := status(v2.mesh); st != "healthy" {
			t.Fatalf("orders-v2, whose app runs: %q", st)
		}
	})
	t.Run("SIGTERM drains and deregisters", func(t *testing.T) {
		var wg sync.WaitGroup
		var out string
		var cerr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, cerr = viaWeb("-H", "x-canary: yes", "http://orders.shop:8080/slow")
		}()
		waitTrue(t, 10*time.Second, "the slow call reached orders-v2", func() bool {
			return strings.Contains(app2.out.String(), "slow call started")
		})
		st := v2.sidecar.stop()
		wg.Wait()
		if cerr != nil || out != "orders-v2\n" {
			t.Fatalf("the call in flight at SIGTERM: %q %v, want it answered", out, cerr)
		}
		if !st.Success() {
			t.Fatalf("sidecar exit: %v\n%s", st, v2.sidecar.out)
		}
		if list := m.sextant(t, "", "instances", "list", "--namespace", "shop", "--service", "orders"); strings.Contains(list, v2.mesh) || !strings.Contains(list, v1.mesh) {
			t.Fatalf("after orders-v2's sidecar stopped, the registry holds:\n%s", list)
		}
	})
}

// metricLine returns the first line of the sidecar's /metrics starting
// with prefix and holding every part; "" if none.
func metricLine(t *testing.T, w *workload, prefix string, parts ...string) string {
	t.Helper()
	resp, err := http.Get("http://" + w.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return l
		}
	}
	return ""
}
