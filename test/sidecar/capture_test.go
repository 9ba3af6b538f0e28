package sidecar_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// captureConfig: the mesh's mutual TLS for default/orders, so that the
// server's records name the caller's identity.
const captureConfig = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}
`

// TestSidecarTransparentCapture: curl and web's sidecar in a network
// namespace of their own (a pod's, joined to the host by a veth pair), the
// server and orders (Python's http.server with its sidecar) on the host.
// curl's plain "GET http://orders:8080/" to a service address (10.99.0.10,
// what a cluster's DNS would answer) fails until "sextant sidecar capture"
// installs its iptables rules in the namespace; then the call goes through
// web's sidecar over the mesh's mutual TLS, and orders' sidecar records
// web's SPIFFE ID. Needs root (it creates the namespace); iptables, curl
// and python3 are installed from Debian when missing.
func TestSidecarTransparentCapture(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("creating a network namespace needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)")
	}
	for _, pkg := range []string{"iptables", "iproute2"} {
		bin := map[string]string{"iptables": "iptables", "iproute2": "ip"}[pkg]
		if _, err := debian.Ensure(bin, pkg); err != nil {
			t.Fatal(err)
		}
	}
	python, err := debian.Ensure("python3", "python3")
	if err != nil {
		t.Fatal(err)
	}
	curlBin, err := debian.Ensure("curl", "curl")
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The namespace and its link, named after this process (interface
	// names have at most 15 bytes: "sxh" and a pid fit). A namespace of a
	// test process that was killed holds the same addresses: remove it.
	removeStaleNamespaces(t)
	id := os.Getpid()
	ns, hostIf, podIf := fmt.Sprintf("sxcap%d", id), fmt.Sprintf("sxh%d", id), fmt.Sprintf("sxp%d", id)
	const hostIP, podIP = "10.201.77.1", "10.201.77.2"
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() }) // its veth end goes with it
	run("ip", "link", "add", hostIf, "type", "veth", "peer", "name", podIf)
	run("ip", "link", "set", podIf, "netns", ns)
	run("ip", "addr", "add", hostIP+"/30", "dev", hostIf)
	run("ip", "link", "set", hostIf, "up")
	inNS := func(args ...string) []string { return append([]string{"ip", "netns", "exec", ns}, args...) }
	run(inNS("ip", "link", "set", "lo", "up")...)
	run(inNS("ip", "addr", "add", podIP+"/30", "dev", podIf)...)
	run(inNS("ip", "link", "set", podIf, "up")...)
	run(inNS("ip", "route", "add", "default", "via", hostIP)...)

	hostAddr := func() string {
		ln, err := net.Listen("tcp", hostIP+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	bin := sextantBin(t)
	api, xds := hostAddr(), hostAddr()
	srv := start(t, "server", bin, "server", "--data", t.TempDir(), "--http", api, "--xds", xds, "--log-level", "warn")
	waitHTTP(t, srv, "http://"+api+"/readyz")
	apply := exec.Command(bin, "config", "apply", "-f", "-", "--server", "http://"+api)
	apply.Stdin = strings.NewReader(captureConfig)
	if out, err := apply.CombinedOutput(); err != nil || !strings.Contains(string(out), "destinationrule default/orders") {
		t.Fatalf("config apply: %v\n%s", err, out)
	}

	appPort, _ := startApp(t, python, "orders-v1")
	orders := &workload{mesh: hostAddr(), outbound: freeAddr(t), admin: freeAddr(t)}
	orders.sidecar = start(t, "sidecar orders", bin, "sidecar", "--service", "default/orders", "--app-port", appPort,
		"--mesh-listen", orders.mesh, "--outbound", orders.outbound, "--admin", orders.admin, "--data", t.TempDir(),
		"--xds", xds, "--registry", "http://"+api, "--label", "app=orders")
	waitHTTP(t, orders.sidecar, "http://"+orders.admin+"/readyz")

	// web: a sidecar in the namespace; its admin API on the namespace's
	// address, which the host reaches over the veth pair.
	web := start(t, "sidecar web", "ip", inNS(bin, "sidecar", "--service", "default/web", "--app-port", "9",
		"--mesh-listen", podIP+":15006", "--outbound", "127.0.0.1:15001", "--admin", podIP+":15000", "--data", t.TempDir(),
		"--xds", xds, "--registry", "http://"+api, "--label", "app=web")[1:]...)
	waitHTTP(t, web, "http://"+podIP+":15000/readyz")

	plain := func() (string, error) {
		out, err := exec.Command("ip", inNS(curlBin, "-sS", "--max-time", "3", "--resolve", "orders:8080:10.99.0.10", "http://orders:8080/")[1:]...).CombinedOutput()
		return string(out), err
	}
	if out, err := plain(); err == nil {
		t.Fatalf("before the capture, the plain call went somewhere: %q", out)
	}
	capture := inNS(bin, "sidecar", "capture", "--outbound-port", "15001", "--include-cidrs", "10.99.0.0/16")
	run(capture...)
	t.Cleanup(func() { exec.Command("ip", append(capture[1:], "--cleanup")...).Run() })
	waitTrue(t, 30*time.Second, "curl's plain call through the mesh", func() bool {
		out, err := plain()
		return err == nil && strings.HasPrefix(out, "orders-v1")
	})
	waitTrue(t, 10*time.Second, "orders' sidecar to record web's identity", func() bool {
		for _, c := range orders.calls(t, "default/orders") {
			if c.Status == 200 && c.TLS && c.Principal == "spiffe://cluster.local/ns/default/sa/web" {
				return true
			}
		}
		return false
	})
}

// removeStaleNamespaces deletes the sxcap<pid> namespaces of processes
// that are gone (a test binary killed before its cleanup ran): their veth
// ends hold this test's addresses, and routes to them would win.
func removeStaleNamespaces(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, ok := strings.CutPrefix(name, "sxcap")
		if !ok || pid == "" {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // its process still runs
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Fatalf("removing %s, left by a process that is gone: %v\n%s", name, err, out)
		}
		t.Logf("removed network namespace %s, left by a process that is gone", name)
	}
}
