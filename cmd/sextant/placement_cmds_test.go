package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// runOn runs a fresh command tree of the scheduler's and the routing
// config's, secrets' and push status' commands with args against the server at url.
func runOn(t *testing.T, url, stdin string, args ...string) (string, error) {
	t.Helper()
	root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newNodesCmd(), newPlaceCmd(), newPlacementsCmd(), newConfigCmd(), newSecretCmd(), newPushCmd())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append(args, "--server", url))
	err := root.Execute()
	return out.String(), err
}

const cliNodes = `apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {zone: a, disk: ssd}
status:
  allocatable: {cpu: "4", memory: 4Gi, pods: "110"}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-b, labels: {zone: b}}
  spec:
    taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
  status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110", example.com/gpu: "2"}}
- apiVersion: v1
  kind: Node
  metadata: {name: node-c, labels: {zone: b}}
  spec: {unschedulable: true}
  status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}
`

const cliPods = `apiVersion: v1
kind: Pod
metadata: {name: web-0, labels: {app: web}}
spec:
  containers: [{name: c, resources: {requests: {cpu: 1500m, memory: 1Gi}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, labels: {app: web}}
spec:
  containers: [{name: c, resources: {requests: {cpu: 1500m, memory: 1Gi}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml, labels: {app: train}}
spec:
  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]
  containers: [{name: c, resources: {requests: {cpu: "1", example.com/gpu: "1"}}}]
`

// TestPlacementCLI drives nodes, place and placements against the real
// server stack and compares their output with golden files (go test -run
// PlacementCLI -update-cli-golden rewrites them).
func TestPlacementCLI(t *testing.T) {
	url := apitest.Start(t).URL
	step := func(golden, stdin, wantErr string, args ...string) {
		t.Helper()
		out, err := runOn(t, url, stdin, args...)
		if wantErr == "" && err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Fatalf("%v: error %v, want one containing %q\n%s", args, err, wantErr, out)
		}
		if golden != "" {
			checkGolden(t, golden, out)
		}
	}
	step("nodes_apply", cliNodes, "", "nodes", "apply", "-f", "-")
	step("nodes_apply_unchanged", cliNodes, "", "nodes", "apply", "-f", "-")
	step("", strings.Replace(cliNodes, `pods: "10"}`, `pods: "10x"}`, 1), "items[2].status.allocatable.pods", "nodes", "apply", "-f", "-")
	step("", "", "no documents", "nodes", "apply", "-f", "-")

	pods := filepath.Join(t.TempDir(), "pods.yaml")
	if err := os.WriteFile(pods, []byte(cliPods), 0o644); err != nil {
		t.Fatal(err)
	}
	step("place_dry_run", "", "", "place", "-f", pods, "--dry-run")
	step("place", "", "", "place", "-f", pods)
	step("", "", "409 conflict", "place", "-f", pods)
	step("place_unschedulable", strings.ReplaceAll(strings.ReplaceAll(cliPods, "web-", "more-"), "trainer", "trainer-2"), "2 of 3 pods are unschedulable", "place", "-f", "-")

	step("nodes_list", "", "", "nodes", "list")
	step("nodes_list_zone_b_json", "", "", "nodes", "list", "-l", "zone=b", "-o", "json", "--page-size", "1")
	step("nodes_get", "", "", "nodes", "get", "node-a")
	step("placements_list", "", "", "placements", "list", "--page-size", "1")
	step("placements_list_node", "", "", "placements", "list", "--node", "node-b", "-o", "json")
	step("placements_get", "", "", "placements", "get", "ml/trainer")
	step("placements_delete", "", "", "placements", "delete", "web-1")
	step("", "", "404 not_found", "placements", "delete", "web-1")
	step("nodes_delete", "", "", "nodes", "delete", "node-a")
	step("", "", "404 not_found", "nodes", "get", "node-a")

	// kubectl's words: a new node (node-a again, node-d) is created, one
	// stored as given unchanged, a replaced one configured.
	nodeD := "apiVersion: v1\nkind: Node\nmetadata: {name: node-d}\nstatus: {allocatable: {cpu: \"1\", pods: \"10\"}}\n"
	step("nodes_apply_created", cliNodes+"---\n"+nodeD, "", "nodes", "apply", "-f", "-")
	step("nodes_apply_configured", strings.Replace(nodeD, `cpu: "1"`, `cpu: "2"`, 1), "", "nodes", "apply", "-f", "-")
}
