package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestRegisterDeregisterAfterFlag: --deregister-after reaches the server
// as deregister_after_seconds and reads back; without --ttl the server's
// refusal names the field; a bad value names the flag.
func TestRegisterDeregisterAfterFlag(t *testing.T) {
	srv := apitest.StartWith(t, apitest.Options{})
	if _, errOut, err := cliAt(t, "instances", "register", "--server", srv.URL, "--service", "orders", "--host", "10.0.0.1",
		"--port", "80", "--id", "a", "--ttl", "10", "--deregister-after", "2m"); err != nil {
		t.Fatalf("register: %v %s", err, errOut)
	}
	out, _, err := cliAt(t, "instances", "get", "a", "--server", srv.URL, "-o", "json")
	if err != nil || !strings.Contains(out, `"deregister_after_seconds": 120`) {
		t.Fatalf("get: %v\n%s", err, out)
	}
	if out, _, err := cliAt(t, "instances", "get", "a", "--server", srv.URL); err != nil || !strings.Contains(out, "TTL:               10s\nDeregister after:  2m0s\n") {
		t.Fatalf("get: %v\n%s", err, out)
	}
	_, _, err = cliAt(t, "instances", "register", "--server", srv.URL, "--service", "orders", "--host", "10.0.0.2",
		"--port", "80", "--deregister-after", "60")
	if err == nil || !strings.Contains(err.Error(), "deregister_after_seconds") || !strings.Contains(err.Error(), "needs ttl_seconds") {
		t.Fatalf("without --ttl: %v", err)
	}
	_, _, err = cliAt(t, "instances", "register", "--server", srv.URL, "--service", "orders", "--host", "10.0.0.2",
		"--port", "80", "--ttl", "5", "--deregister-after", "1.5s")
	if err == nil || !strings.Contains(err.Error(), `--deregister-after "1.5s": want whole seconds`) {
		t.Fatalf("bad value: %v", err)
	}
}

// TestServerRefusesNegativeDeregisterAfter: a negative server default is
// refused before anything starts, naming the flag.
func TestServerRefusesNegativeDeregisterAfter(t *testing.T) {
	err := runServer(t.Context(), serverFlags{data: t.TempDir(), http: "127.0.0.1:0", logFormat: "text", logLevel: "error",
		clusterLease: 5 * time.Second, deregisterAfter: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "--deregister-after -1s: must not be negative") {
		t.Fatalf("runServer: %v", err)
	}
}
