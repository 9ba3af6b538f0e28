package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestVersionSubsetEndToEnd: instances registered with the CLI's
// --version (no "version" metadata) are selected by --selector version=v2,
// by a DestinationRule subset labels {version: v2} (the dry run warns
// only about the subset nothing matches), and the gateway routes calls to
// them through the VirtualService: the server, the gateway and the
// upstreams are real processes' parts, as the binary runs them.
func TestVersionSubsetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: server, gateway and upstreams")
	}
	api, proxy, _ := startMesh(t)
	server := api.BaseURL()
	cli := func(args ...string) string {
		t.Helper()
		root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(newInstancesCmd(), newConfigCmd())
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--server", server))
		if err := root.Execute(); err != nil {
			t.Fatalf("sextant %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	v1, v2 := startUpstream(t, "v1-a"), startUpstream(t, "v2-a")
	for _, u := range []struct {
		up      *upstream
		version string
	}{{v1, "v1"}, {v2, "v2"}} {
		cli("instances", "register", "--service", "orders", "--id", u.up.name, "--host", "127.0.0.1",
			"--port", strconv.Itoa(u.up.addr.Port), "--version", u.version)
	}
	if out := cli("instances", "list", "--service", "orders", "--selector", "version=v2"); !strings.Contains(out, "v2-a") || strings.Contains(out, "v1-a") {
		t.Fatalf("--selector version=v2 listed:\n%s", out)
	}

	cfg := filepath.Join(t.TempDir(), "routing.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
  - {name: v3, labels: {version: v3}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  http:
  - match: [{headers: {x-old: {exact: "yes"}}}]
    route: [{destination: {host: orders, subset: v1}}]
  - route: [{destination: {host: orders, subset: v2}}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	dry := cli("config", "apply", "-f", cfg, "--dry-run")
	if !strings.Contains(dry, `subset "v3" (labels version=v3) matches no registered instance of default/orders`) ||
		strings.Contains(dry, `subset "v2" (labels`) || strings.Contains(dry, `subset "v1" (labels`) {
		t.Fatalf("dry run, want a warning about subset v3 only:\n%s", dry)
	}
	cli("config", "apply", "-f", cfg)

	// Every call reaches v2 once the config is through; the header match
	// reaches v1.
	waitTrue(t, 10*time.Second, func() bool { return tally(t, proxy, 5, nil)["v2-a"] == 5 })
	if got := tally(t, proxy, 20, nil); got["v2-a"] != 20 {
		t.Fatalf("default route to subset v2 reached %v", got)
	}
	if got := tally(t, proxy, 20, map[string]string{"x-old": "yes"}); got["v1-a"] != 20 {
		t.Fatalf("x-old: yes reached %v, want v1-a only", got)
	}
}
