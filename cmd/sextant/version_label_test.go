package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestVersionSubsetEndToEnd: instances registered with the CLI's
// --version (no "version" metadata) are selected by --selector version=v2
// and by DestinationRule subsets labels {version: ...}: the dry run warns
// about the subset no instance matches yet, and once both are registered
// the gateway routes calls by subset over xDS; with the subsets empty its
// 404 names them. Server, gateway and upstreams run as the binary runs
// them.
func TestVersionSubsetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	api, proxy, _ := startMesh(t)
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, err := cliAt(t, append(args, "--server", api.BaseURL())...)
		if err != nil {
			t.Fatalf("sextant %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	register := func(u *upstream, version string) {
		cli("instances", "register", "--service", "orders", "--id", u.name, "--host", "127.0.0.1",
			"--port", strconv.Itoa(u.addr.Port), "--version", version)
	}
	v1, v2 := startUpstream(t, "v1-a"), startUpstream(t, "v2-a")
	register(v2, "v2")
	if out := cli("instances", "list", "--service", "orders", "--selector", "version=v2"); !strings.Contains(out, "v2-a") {
		t.Fatalf("--selector version=v2 listed:\n%s", out)
	}
	cfg := filepath.Join(t.TempDir(), "routing.yaml")
	if err := os.WriteFile(cfg, []byte(meshConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	dry := cli("config", "apply", "-f", cfg, "--dry-run")
	if !strings.Contains(dry, `subset "v1" (labels version=v1) matches no registered instance of default/orders`) ||
		strings.Contains(dry, `subset "v2" (labels`) {
		t.Fatalf("dry run with only v2 registered, want a warning about subset v1 only:\n%s", dry)
	}
	register(v1, "v1")
	if out := cli("config", "apply", "-f", cfg); strings.Contains(out, "matches no registered instance") {
		t.Fatalf("apply with both registered warned:\n%s", out)
	}

	// The header match reaches subset v2 only; the weighted default
	// route reaches both subsets.
	canary := map[string]string{"x-canary": "yes"}
	waitTrue(t, 10*time.Second, func() bool { return tally(t, proxy, 5, canary)["v2-a"] == 5 })
	if got := tally(t, proxy, 20, canary); got["v2-a"] != 20 {
		t.Fatalf("x-canary: yes reached %v, want v2-a only", got)
	}
	waitTrue(t, 10*time.Second, func() bool {
		got := tally(t, proxy, 40, nil)
		return got["v1-a"] > 0 && got["v2-a"] > 0 && got["v1-a"]+got["v2-a"] == 40
	})

	// With no instance left, every route's subsets are empty: the routes
	// are left out, and the gateway's 404 says which and why.
	cli("instances", "deregister", "v1-a", "v2-a")
	var body string
	waitTrue(t, 10*time.Second, func() bool {
		var code int
		body, code = get(t, proxy, "orders", "/", nil)
		return code == 404
	})
	for _, want := range []string{`no route for host \"orders\"`, `spec.http[1]: subset \"v1\" of default/orders has no usable endpoint; subset \"v2\" of default/orders has no usable endpoint`} {
		if !strings.Contains(body, want) {
			t.Fatalf("404 body %s, want it to contain %s", body, want)
		}
	}
}
