package push_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// grpcJSXDS installs testdata/grpcjsxds (Node's @grpc/grpc-js-xds at the
// versions its package-lock.json pins) once per lock file into the user's
// cache, and returns the directory to run client.js in. Node and npm are
// required: the test fails, naming what to install, when they are missing.
func grpcJSXDS(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required for the grpc-js-xds interop test (apt-get install -y nodejs npm): %v", tool, err)
		}
	}
	src, err := filepath.Abs(filepath.Join("testdata", "grpcjsxds"))
	if err != nil {
		t.Fatal(err)
	}
	var files [3][]byte
	for i, name := range []string{"package.json", "package-lock.json", "client.js"} {
		if files[i], err = os.ReadFile(filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256(bytes.Join(files[:], []byte{0}))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sextant-test", "grpcjsxds-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@grpc", "grpc-js-xds", "package.json")); err == nil {
		return dir
	}
	// Install beside, then rename: a concurrent run sees all or nothing.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for i, name := range []string{"package.json", "package-lock.json", "client.js"} {
		if err := os.WriteFile(filepath.Join(tmp, name), files[i], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", tmp, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(dir); serr != nil { // not a concurrent install that won
			t.Fatal(err)
		}
	}
	return dir
}

// runGRPCJSXDS calls xds:///target n times with Node's xDS client (node
// id node) and returns the backends that answered. Node stays connected
// until connected returns, so that it can read the server's view of it.
func runGRPCJSXDS(t *testing.T, dir string, cp *controlPlane, node, target string, n int, connected func()) map[string]int {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "metadata": {"NAMESPACE": "default"}, "locality": {}}
	}`, cp.addr, node) // grpc-js-xds requires a locality, even empty
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.js", target, fmt.Sprint(n))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP_CONFIG="+bootstrap)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first line is the answer, or the error of the first failed call.
	line, _ := bufio.NewReader(stdout).ReadBytes('\n')
	var res struct {
		Hosts map[string]int `json:"hosts"`
		Error string         `json:"error"`
	}
	jsonErr := json.Unmarshal(line, &res)
	if jsonErr == nil {
		connected()
	}
	stdin.Close() // client.js exits when its stdin ends
	if err := cmd.Wait(); err != nil || jsonErr != nil || res.Error != "" {
		t.Fatalf("grpc-js-xds client: %v, %v\n%s%s", err, jsonErr, line, stderr.Bytes())
	}
	return res.Hosts
}

const leastRequestConfig = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec: {host: orders, trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}}
`

// TestLeastRequestInterop: a LEAST_REQUEST cluster is accepted by
// grpc-go's and Node's xDS clients (grpc-js-xds NACKed the legacy
// lb_policy enum; the load_balancing_policy list lets it fall back to round
// robin), and both send every call to the service's instances.
func TestLeastRequestInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("interop: runs Node's grpc-js-xds")
	}
	dir := grpcJSXDS(t)
	b1, b2 := startBackend(t, "lr-1"), startBackend(t, "lr-2")
	reg := registryWith(t, leastRequestConfig)
	reg.Upsert(b1.instance("stable"), b2.instance("stable"))
	cp := startControlPlane(t, context.Background(), reg, nil)

	// Each client has ACKed every type, clusters included, and NACKed none.
	accepted := func(node string) {
		t.Helper()
		for _, st := range cp.ads.Status() {
			if st.NodeID != node {
				continue
			}
			for _, ts := range st.Types {
				if len(ts.NACKs) != 0 || ts.VersionAcked == "" {
					t.Errorf("%s: %s acked %q, NACKs %+v", node, ts.Type, ts.VersionAcked, ts.NACKs)
				}
			}
			if len(st.Types) != 4 {
				t.Errorf("%s subscribed to %d types, want 4", node, len(st.Types))
			}
			return
		}
		t.Errorf("%s is not connected", node)
	}
	got := runGRPCJSXDS(t, dir, cp, "node-client", "orders", 20, func() { accepted("node-client") })
	if got["lr-1"]+got["lr-2"] != 20 {
		t.Fatalf("grpc-js-xds reached %v, want 20 calls to lr-1 and lr-2", got)
	}
	// grpc-go's least_request picks among connected backends: both, once
	// both are connected.
	client := testgrpc.NewTestServiceClient(dial(t, cp, "go-client"))
	settle(t, client, "", 20, func(got map[string]int) bool { return got["lr-1"] > 0 && got["lr-2"] > 0 })
	accepted("go-client")
}
