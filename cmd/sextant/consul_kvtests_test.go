package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// consulTestShim stands for the Consul API module's own test harness
// (makeClient starts a consul binary through its sdk's testutil): the
// client is pointed at a running Sextant server instead.
const consulTestShim = `package api

import (
	crand "crypto/rand"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/sdk/testutil"
)

// sextantServer stands for testutil.TestServer: a running Sextant
// server's Consul API at $SEXTANT_CONSUL_ADDR.
type sextantServer struct {
	Config           *testutil.TestServerConfig
	HTTPAddr         string
	LANAddr, WANAddr string
	client           *Client
}

func (sextantServer) Stop() error                   { return nil }
func (sextantServer) WaitForSerfCheck(t *testing.T) {}

// WaitForActiveCARoot waits, as testutil's does, for the agent to list an
// active Connect CA root.
func (s sextantServer) WaitForActiveCARoot(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		roots, _, err := s.client.Agent().ConnectCARoots(nil)
		if err == nil && roots.ActiveRootID != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no active Connect CA root: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (sextantServer) JoinWAN(t *testing.T, addr string) {
	t.Fatal("sextant-harness: gossip (WAN join of a second datacenter) is not served")
}

type configCallback func(c *Config)

func makeClient(t *testing.T) (*Client, sextantServer) { return makeClientWithConfig(t, nil, nil) }

func makeClientWithoutConnect(t *testing.T) (*Client, sextantServer) { return makeClient(t) }

// makeACLClient stands for a Consul with ACLs on and the root token
// "root": Consul's own tokens (its ACL API) are not Sextant's.
func makeACLClient(t *testing.T) (*Client, sextantServer) {
	t.Fatal("sextant-harness: Consul's ACL system (a root token set in its configuration) is not served")
	return nil, sextantServer{}
}

// makeClientWithConfig applies the test's server configuration to what
// the running server has: a node name or node meta it lacks is printed as
// the server flags to restart it with (the harness does, and runs the
// test again); what Sextant has no flag for fails naming it.
func makeClientWithConfig(t *testing.T, cb1 configCallback, cb2 testutil.ServerConfigCallback) (*Client, sextantServer) {
	conf := DefaultConfig()
	if cb1 != nil {
		cb1(conf)
	}
	conf.Address = os.Getenv("SEXTANT_CONSUL_ADDR")
	c, err := NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	self, err := c.Agent().Self()
	if err != nil {
		t.Fatal(err)
	}
	have := &testutil.TestServerConfig{Datacenter: "dc1", Server: true, Bootstrap: true}
	have.NodeName, _ = self["Config"]["NodeName"].(string)
	have.NodeID, _ = self["Config"]["NodeID"].(string)
	have.Version, _ = self["Config"]["Version"].(string)
	// Consul's -bind: the address the agent's node is registered with.
	if n, _, err := c.Catalog().Node(have.NodeName, nil); err == nil && n != nil && n.Node != nil {
		have.Bind = n.Node.TaggedAddresses["lan"]
	}
	if m, ok := self["Meta"]; ok && len(m) > 0 {
		have.NodeMeta = map[string]string{}
		for k, v := range m {
			have.NodeMeta[k], _ = v.(string)
		}
	}
	connectOn, _ := self["DebugConfig"]["ConnectEnabled"].(bool)
	have.EnableScriptChecks, _ = self["DebugConfig"]["EnableRemoteScriptChecks"].(bool)
	have.Connect = map[string]interface{}{"enabled": connectOn}
	want := *have
	want.Connect = map[string]interface{}{"enabled": true} // testutil's default
	if cb2 != nil {
		cb2(&want)
	}
	var flags []string
	// Only a test that turns Connect off asks for a server without it
	// (makeClientWithoutConnect's nil leaves it on, as it changes nothing
	// these tests see).
	if on, ok := want.Connect["enabled"].(bool); ok && on != connectOn {
		flags = append(flags, fmt.Sprintf("--consul-connect=%v", on))
	}
	// Consul's -config-file is --consul-config-file. The harness starts
	// the server with an empty file at $SEXTANT_CONSUL_CONFIG (a test's
	// own file has a path of its own at each run); the shim points it at
	// the test's file, which the server reads at a reload.
	var haveFiles []string
	if fs, ok := self["DebugConfig"]["ConfigFiles"].([]interface{}); ok {
		for _, f := range fs {
			s, _ := f.(string)
			haveFiles = append(haveFiles, s)
		}
	}
	var args []string
	for i := 0; i < len(want.Args); i++ {
		if want.Args[i] == "-config-file" && i+1 < len(want.Args) {
			i++
			link := os.Getenv("SEXTANT_CONSUL_CONFIG")
			if !contains(haveFiles, link) {
				flags = append(flags, "--consul-config-file", link)
				continue
			}
			os.Remove(link)
			if err := os.Symlink(want.Args[i], link); err != nil {
				t.Fatal(err)
			}
			continue
		}
		args = append(args, want.Args[i])
	}
	want.Args = args
	if want.EnableScriptChecks && !have.EnableScriptChecks {
		flags = append(flags, "--consul-enable-script-checks")
	}
	if want.NodeName != have.NodeName {
		flags = append(flags, "--consul-node", want.NodeName)
	}
	keys := make([]string, 0, len(want.NodeMeta))
	for k := range want.NodeMeta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := have.NodeMeta[k]; !ok || v != want.NodeMeta[k] {
			flags = append(flags, "--consul-node-meta", k+"="+want.NodeMeta[k])
		}
	}
	switch {
	case len(want.Args) > 0:
		t.Fatalf("sextant-harness: agent configuration files (%v) are not served", want.Args)
	case want.Datacenter != have.Datacenter:
		t.Fatalf("sextant-harness: a second datacenter (%s) needs WAN gossip, not served", want.Datacenter)
	case !want.Server:
		t.Fatalf("sextant-harness: client agents (LAN gossip) are not served")
	case len(flags) > 0:
		fmt.Printf("sextant-server-flags: %s\n", strings.Join(flags, " "))
		t.Fatalf("sextant-harness: restart the server with %v", flags)
	}
	s := sextantServer{Config: have, HTTPAddr: conf.Address, client: c}
	if connectOn {
		s.WaitForActiveCARoot(t) // as testutil's harness does with Connect on
	}
	return s.client, s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func testKey() string {
	buf := make([]byte, 16)
	if _, err := crand.Read(buf); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%12x", buf[0:4], buf[4:6], buf[6:8], buf[8:10], buf[10:16])
}
`

// consulTxnTests are consul/api's transaction tests that mix node,
// service and check operations into their transactions: each runs on a
// server of its own, as in Consul's harness, since they list every key
// and service of the server.
var consulTxnTests = []string{"TestAPI_ClientTxn", "TestAPI_ClientTxnWrite"}

// TestConsulClientOwnKVTests runs hashicorp's own KV and transaction tests
// (kv_test.go and txn_test.go of the github.com/hashicorp/consul/api
// module this repository requires, from the module cache) against a real
// "sextant server --consul-api": every one must pass, those of sessions
// (?acquire, ?release) and of transactions (/v1/txn, KV, node, service
// and check operations) included.
func TestConsulClientOwnKVTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	goCmd := copyConsulAPITests(ctx, t, []string{"kv_test.go", "txn_test.go"})
	if out, err := goCmd("", "test", "-c", "-o", "api.test", "."); err != nil {
		t.Fatalf("building consul/api's tests: %v\n%s", err, out)
	}
	// One test at a time: Consul's harness gives each test a server of its
	// own, here the KV ones share one, and a test's blocking read of an
	// absent key returns early when another test writes (its index is the
	// KV table's, in Consul too): TestAPI_ClientWatchGet failed so beside
	// KVClientTxn.
	_, consulAddr := startConsulServer(t)
	txnRun := "^(" + strings.Join(consulTxnTests, "|") + ")$"
	got, _ := goCmd(consulAddr, "./api.test", "-test.count=1", "-test.v", "-test.parallel=1", "-test.timeout=3m", "-test.run", "^TestAPI_", "-test.skip", txnRun)
	for _, name := range consulTxnTests {
		_, addr := startConsulServer(t)
		out, _ := goCmd(addr, "./api.test", "-test.count=1", "-test.v", "-test.timeout=90s", "-test.run", "^"+name+"$")
		got += out
	}
	result := consulTestResults(got)
	if len(result) < 11 {
		t.Fatalf("ran %d of consul/api's KV and transaction tests, want 11:\n%s", len(result), got)
	}
	for name, res := range result {
		if res != "PASS" {
			t.Errorf("%s: %s, want PASS", name, res)
		}
	}
	for _, name := range append([]string{"TestAPI_ClientAcquireRelease", "TestAPI_KVClientTxn"}, consulTxnTests...) {
		if result[name] != "PASS" {
			t.Errorf("%s: %q, want PASS", name, result[name])
		}
	}
	if t.Failed() {
		t.Logf("consul/api's output:\n%s", got)
	}
}

// consulTestResults reads go test -v's verdicts by test name.
func consulTestResults(out string) map[string]string {
	result := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)`).FindAllStringSubmatch(out, -1) {
		result[m[2]] = m[1]
	}
	return result
}

// copyConsulAPITests copies the consul/api module's sources and the test
// files named into a temporary module, and returns how to run the go
// command in it with $SEXTANT_CONSUL_ADDR set to a server's Consul API.
func copyConsulAPITests(ctx context.Context, t *testing.T, testFiles []string) func(consulAddr string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/hashicorp/consul/api").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/hashicorp/consul/api: %v", err)
	}
	src := strings.TrimSpace(string(out))
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(src, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if !(strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") || slices.Contains(testFiles, name) || name == "ce_test.go" || name == "go.mod" || name == "go.sum") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "sextant_shim_test.go"), []byte(consulTestShim), 0o644); err != nil {
		t.Fatal(err)
	}
	// The catalog and health tests share one helper of api_test.go, whose
	// other half is the consul harness the shim replaces: it is copied alone.
	if slices.Contains(testFiles, "catalog_test.go") || slices.Contains(testFiles, "health_test.go") {
		b, err := os.ReadFile(filepath.Join(src, "api_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		start := strings.Index(string(b), "func testNodeServiceCheckRegistrations(")
		end := strings.Index(string(b[max(start, 0):]), "\n}\n")
		if start < 0 || end < 0 {
			t.Fatal("api_test.go of consul/api has no testNodeServiceCheckRegistrations")
		}
		helper := "package api\n\nimport (\n\t\"testing\"\n\n\t\"github.com/stretchr/testify/require\"\n)\n\n" + string(b[start:start+end+3])
		if err := os.WriteFile(filepath.Join(dir, "sextant_helper_test.go"), []byte(helper), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := func(consulAddr string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		if args[0] != "./api.test" {
			cmd = exec.CommandContext(ctx, "go", args...)
		}
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SEXTANT_CONSUL_ADDR="+consulAddr, "SEXTANT_CONSUL_CONFIG="+filepath.Join(dir, "sextant-agent.json"), "GOFLAGS=-mod=mod", "GOWORK=off")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	// The module's test-only requirements (its sdk) go with the other
	// test files; testify stays.
	if out, err := goCmd("", "mod", "tidy"); err != nil {
		t.Fatalf("go mod tidy of the copied consul/api module (its test dependencies come from the module proxy or cache): %v\n%s", err, out)
	}
	return goCmd
}

// TestConsulClientOwnSessionTests runs hashicorp's own session, lock and
// semaphore tests (session_test.go, lock_test.go, semaphore_test.go of
// consul/api), each against a fresh "sextant server --consul-api" of its
// own, as each gets a fresh Consul in its own harness (they share key
// names and count every session): every one must pass, those binding a
// session to node and service checks registered through the catalog
// included.
func TestConsulClientOwnSessionTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	goCmd := copyConsulAPITests(ctx, t, []string{"session_test.go", "lock_test.go", "semaphore_test.go"})
	if out, err := goCmd("", "test", "-c", "-o", "api.test", "."); err != nil {
		t.Fatalf("building consul/api's tests: %v\n%s", err, out)
	}
	list, err := goCmd("", "./api.test", "-test.list", "^TestAPI_(Session|Lock|Semaphore)")
	if err != nil {
		t.Fatalf("listing consul/api's tests: %v\n%s", err, list)
	}
	names := strings.Fields(list)
	if len(names) < 25 {
		t.Fatalf("%d of consul/api's session, lock and semaphore tests listed, want at least 25:\n%s", len(names), list)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			_, consulAddr := startConsulServer(t)
			out, _ := goCmd(consulAddr, "./api.test", "-test.count=1", "-test.v", "-test.run", "^"+name+"$")
			res := consulTestResults(out)[name]
			if res != "PASS" {
				t.Errorf("%s: %q, want PASS\n%s", name, res, out)
			}
		})
	}
}
