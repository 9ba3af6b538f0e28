package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestBenchRegistryFlags runs "bench registry" with its flags against the
// real server stack and checks it prints one JSON object with exactly the
// scenarios asked for.
func TestBenchRegistryFlags(t *testing.T) {
	srv := apitest.Start(t)

	cmd := newBenchRegistryCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--server", srv.URL, "-q", "--scenarios", "query,watch", "--duration", "100ms",
		"--query-conns", "2", "--query-size", "10", "--watch-rounds", "3", "--namespace", "bench-flags"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	for _, k := range []string{"server", "namespace", "machine", "query", "watch", "cleanup"} {
		if _, ok := got[k]; !ok {
			t.Errorf("output lacks %q:\n%s", k, out.String())
		}
	}
	for _, k := range []string{"register", "batch", "heartbeat", "changes"} {
		if _, ok := got[k]; ok {
			t.Errorf("output has %q, which was not asked for", k)
		}
	}
	if string(got["namespace"]) != `"bench-flags"` {
		t.Errorf("namespace = %s", got["namespace"])
	}
}

// TestBenchRegistryCompare measures two real stacks side by side, one with
// ACLs on (the bench sends its token), and prints medians and ratios.
func TestBenchRegistryCompare(t *testing.T) {
	plain := apitest.Start(t)
	guarded := apitest.StartWith(t, apitest.Options{ACL: acl.Options{Enabled: true}})
	var boot struct {
		Secret string `json:"secret"`
	}
	resp, err := guarded.Client().Post(guarded.URL+"/v1/acl/bootstrap", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&boot)
	resp.Body.Close()

	cmd := newBenchRegistryCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--server", plain.URL, "--compare-server", guarded.URL, "--compare-token", boot.Secret, "--rounds", "2",
		"-q", "--scenarios", "register,query", "--duration", "100ms", "--conns", "4", "--query-conns", "2", "--query-size", "10"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var got compareResult
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	for _, name := range []string{"register", "query"} {
		f := got.Scenarios[name]
		if f == nil || len(f.APerSecond) != 2 || len(f.BPerSecond) != 2 || f.Errors != 0 || f.MedianRatio <= 0 {
			t.Fatalf("%s: %+v\n%s", name, f, out.String())
		}
	}
	if fmt.Sprint(got.Order) != "[a b b a]" {
		t.Fatalf("order %v, want alternating", got.Order)
	}
	// Without the token the guarded server refuses the load.
	cmd = newBenchRegistryCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--server", guarded.URL, "-q", "--scenarios", "query", "--duration", "100ms"})
	if err := cmd.Execute(); err == nil {
		t.Fatal("bench against an ACL'd server without a token succeeded")
	}
}
