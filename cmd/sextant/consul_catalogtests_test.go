package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestConsulClientOwnCatalogTests runs hashicorp's own agent, catalog,
// health and status tests (agent_test.go, catalog_test.go, health_test.go,
// status_test.go of consul/api), each against a fresh "sextant server
// --consul-api" of its own, as each gets a fresh Consul in its own
// harness. A test whose server configuration names a node or node meta
// (testutil.TestServerConfig), turns Connect off, enables script checks
// or gives a configuration file, prints the flags the
// shim wants and runs again on a server started with them; with Connect
// on, the shim waits for an active CA root first, as Consul's harness
// does. Each test listed in
// consulCatalogTestsFailing must fail naming its reason; every other
// must pass.
func TestConsulClientOwnCatalogTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	goCmd := copyConsulAPITests(ctx, t, []string{"agent_test.go", "catalog_test.go", "health_test.go", "status_test.go"})
	if out, err := goCmd("", "test", "-c", "-o", "api.test", "."); err != nil {
		t.Fatalf("building consul/api's tests: %v\n%s", err, out)
	}
	list, err := goCmd("", "./api.test", "-test.list", "^Test")
	if err != nil {
		t.Fatalf("listing consul/api's tests: %v\n%s", err, list)
	}
	names := strings.Fields(list)
	if len(names) < 95 {
		t.Fatalf("%d of consul/api's agent, catalog, health and status tests listed, want at least 95:\n%s", len(names), list)
	}
	// $SEXTANT_CONSUL_BASELINE_BIN runs the tests against another build
	// (the figures of docs/compat.md compare with the previous one), and
	// only reports.
	baseline := os.Getenv("SEXTANT_CONSUL_BASELINE_BIN")
	flagsLine := regexp.MustCompile(`(?m)^sextant-server-flags: (.*)$`)
	passed := 0
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			var out string
			var flags []string
			for try := 0; try < 2; try++ {
				// A server started with --consul-config-file FILE starts
				// with it empty (the shim points it at the test's own).
				for i := 0; i+1 < len(flags); i++ {
					if flags[i] == "--consul-config-file" {
						os.Remove(flags[i+1]) // a link to an earlier test's file
						if err := os.WriteFile(flags[i+1], nil, 0o644); err != nil {
							t.Fatal(err)
						}
					}
				}
				consulAddr := startConsulServerOf(t, baseline, flags...)
				out, _ = goCmd(consulAddr, "./api.test", "-test.count=1", "-test.v", "-test.timeout=90s", "-test.run", "^"+name+"$")
				m := flagsLine.FindStringSubmatch(out)
				if m == nil || flags != nil {
					break
				}
				flags = strings.Fields(m[1])
			}
			res := consulTestResults(out)[name]
			if baseline != "" {
				if res == "PASS" {
					passed++
				}
				t.Logf("baseline %s: %s %s", name, res, firstFailure(out))
				return
			}
			reason, failing := consulCatalogTestsFailing[name]
			switch {
			case res == "PASS" && !failing:
				passed++
			case failing && res == "PASS":
				t.Errorf("%s passes; it was listed as failing (%s): take it off consulCatalogTestsFailing", name, reason)
			case failing && (res != "FAIL" || !strings.Contains(out, reason)):
				t.Errorf("%s: %s, want FAIL naming %q\n%s", name, res, reason, out)
			case !failing:
				t.Errorf("%s: %q, want PASS\n%s", name, res, out)
			}
		})
	}
	t.Logf("%d of %d consul/api agent, catalog, health and status tests pass", passed, len(names))
}

// consulCatalogTestsFailing are consul/api's agent, catalog, health and
// status tests that fail against Sextant, each with the text its failure
// names (docs/compat.md lists them with the reason).
var consulCatalogTestsFailing = map[string]string{
	// Gossip: Sextant's servers share a store, not a Serf pool.
	"TestAPI_AgentMembers":           "does not serve gossip members",
	"TestAPI_AgentMembersOpts":       "needs WAN gossip",
	"TestAPI_AgentJoin":              "interface {} is nil, not string", // its Serf LAN address (DebugConfig) is absent
	"TestAPI_AgentLeave":             "client agents (LAN gossip) are not served",
	"TestAPI_AgentForceLeave":        "does not serve gossip",
	"TestAPI_AgentForceLeavePrune":   "does not serve gossip",
	"TestAPI_AgentForceLeaveOptions": "does not serve gossip",
	// Consul's ACL system (tokens are Sextant's).
	"TestAgent_ServiceRegisterOpts_Token": "Consul's ACL system",
	"TestAPI_AgentUpdateToken":            "Consul's ACL system",
	// Connect: intentions (its CA roots and leaves are Sextant's CA's;
	// the connect views and config entries are served).
	"TestAPI_AgentConnectAuthorize": "does not serve Connect's authorization",
}

// startConsulServerOf is startConsulServer running the binary bin (""
// builds this one).
func startConsulServerOf(t *testing.T, bin string, extra ...string) (consulAddr string) {
	t.Helper()
	if bin == "" {
		_, consulAddr = startConsulServer(t, extra...)
		return consulAddr
	}
	addr := freeAddr(t)
	consulAddr = freeAddr(t)
	srv := startServer(t, bin, t.TempDir(), addr, append([]string{"--consul-api", consulAddr}, extra...)...)
	t.Cleanup(func() { stopServer(t, srv) })
	return consulAddr
}

// firstFailure is the first line of go test's output that says why a
// test failed (with the next one when it ends at its location), for the
// report of a baseline.
func firstFailure(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "Error Trace:"):
			continue
		case strings.HasPrefix(l, "Error:"), strings.HasPrefix(l, "panic:"):
			return l
		case regexp.MustCompile(`_test\.go:\d+:`).MatchString(l):
			if strings.HasSuffix(l, ":") && i+1 < len(lines) {
				l += " " + strings.TrimSpace(lines[i+1])
			}
			return l
		}
	}
	return ""
}
