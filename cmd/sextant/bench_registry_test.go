package main

import (
	"bytes"
	"encoding/json"
	"testing"

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
