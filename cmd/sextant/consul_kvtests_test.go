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
	"testing"
)

// sextantServer stands for testutil.TestServer: a running Sextant
// server's Consul API at $SEXTANT_CONSUL_ADDR.
type sextantServer struct{ Config struct{ NodeName string } }

func (sextantServer) Stop() error                   { return nil }
func (sextantServer) WaitForSerfCheck(t *testing.T) {}

func makeClient(t *testing.T) (*Client, sextantServer) {
	conf := DefaultConfig()
	conf.Address = os.Getenv("SEXTANT_CONSUL_ADDR")
	c, err := NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	var s sextantServer
	if s.Config.NodeName, err = c.Agent().NodeName(); err != nil {
		t.Fatal(err)
	}
	return c, s
}

func makeClientWithoutConnect(t *testing.T) (*Client, sextantServer) { return makeClient(t) }

func testKey() string {
	buf := make([]byte, 16)
	if _, err := crand.Read(buf); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%12x", buf[0:4], buf[4:6], buf[6:8], buf[8:10], buf[10:16])
}
`

// TestConsulClientOwnKVTests runs hashicorp's own KV tests (kv_test.go of
// the github.com/hashicorp/consul/api module this repository requires,
// from the module cache) against a real "sextant server --consul-api".
// The one that needs transactions (/v1/txn), not served yet, must fail
// naming them (docs/compat.md); every other one must pass, the one of
// sessions (?acquire, ?release) included.
func TestConsulClientOwnKVTests(t *testing.T) {
	_, consulAddr := startConsulServer(t)
	got := runConsulAPITests(t, consulAddr, []string{"kv_test.go"}, "^TestAPI_")
	result := consulTestResults(got)
	needTxn := map[string]bool{"TestAPI_KVClientTxn": true}
	if len(result) < 9 {
		t.Fatalf("ran %d of consul/api's KV tests, want 9:\n%s", len(result), got)
	}
	for name, res := range result {
		switch {
		case needTxn[name] && res != "FAIL":
			t.Errorf("%s: %s; it needs transactions, which are not served: if they are now, expect it to pass", name, res)
		case !needTxn[name] && res != "PASS":
			t.Errorf("%s: %s, want PASS", name, res)
		}
	}
	if result["TestAPI_ClientAcquireRelease"] != "PASS" {
		t.Errorf("TestAPI_ClientAcquireRelease (sessions, ?acquire, ?release): %q, want PASS", result["TestAPI_ClientAcquireRelease"])
	}
	if !strings.Contains(got, "does not serve transactions") {
		t.Errorf("the transaction test did not fail naming transactions:\n%s", got)
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

// runConsulAPITests copies the consul/api module's sources and the test
// files named (from the module cache) beside consulTestShim, and runs the
// tests matching run against the Consul API at consulAddr; it returns
// go test -v's output.
func runConsulAPITests(t *testing.T, consulAddr string, testFiles []string, run string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	goCmd := copyConsulAPITests(ctx, t, testFiles)
	got, _ := goCmd(consulAddr, "test", "-count=1", "-v", "-run", run, ".")
	return got
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
		if !(strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") || slices.Contains(testFiles, name) || name == "go.mod" || name == "go.sum") {
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
	goCmd := func(consulAddr string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		if args[0] != "./api.test" {
			cmd = exec.CommandContext(ctx, "go", args...)
		}
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SEXTANT_CONSUL_ADDR="+consulAddr, "GOFLAGS=-mod=mod", "GOWORK=off")
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

// consulSessionTestsNeedCatalog are consul/api's session tests that
// register a node or a service check through /v1/catalog/register first,
// which is not served yet (docs/compat.md).
var consulSessionTestsNeedCatalog = map[string]bool{"TestAPI_SessionNodeChecks": true, "TestAPI_SessionServiceChecks": true}

// TestConsulClientOwnSessionTests runs hashicorp's own session, lock and
// semaphore tests (session_test.go, lock_test.go, semaphore_test.go of
// consul/api), each against a fresh "sextant server --consul-api" of its
// own, as each gets a fresh Consul in its own harness (they share key
// names and count every session). Those that register through
// /v1/catalog/register first must fail naming it; every other must pass.
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
			switch {
			case consulSessionTestsNeedCatalog[name]:
				if res != "FAIL" || !strings.Contains(out, "does not serve catalog registers") {
					t.Errorf("%s: %s; it registers through /v1/catalog/register, not served: if it is now, expect it to pass\n%s", name, res, out)
				}
			case res != "PASS":
				t.Errorf("%s: %q, want PASS\n%s", name, res, out)
			}
		})
	}
}
