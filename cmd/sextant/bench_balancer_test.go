package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// TestBenchBalancerFlags runs "bench balancer" with every flag, tiny, and
// checks that it prints one JSON object per policy with the keys scripts
// read.
func TestBenchBalancerFlags(t *testing.T) {
	cmd := newBenchBalancerCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--providers", "../../internal/bench/balancer/testdata/race-providers.json",
		"--policies", "random,oracle", "--scale", "64", "--warmup", "100ms", "--phase", "100ms",
		"--timeout", "1s", "--seed", "3"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one JSON object per policy:\n%s", len(lines), out.String())
	}
	want := goldenKeys(t, "balancer")
	for i, policy := range []string{"random", "oracle"} {
		if got := printedKeys(t, lines[i]); !slices.Equal(got, want) {
			t.Errorf("%s: printed keys %q, want %q", policy, got, want)
		}
		var res struct {
			Policy    string `json:"policy"`
			Scale     int    `json:"scale"`
			InFlight  int    `json:"in_flight"`
			Successes int64  `json:"successes"`
		}
		if err := json.Unmarshal(lines[i], &res); err != nil {
			t.Fatal(err)
		}
		if res.Policy != policy || res.Scale != 64 || res.InFlight != 16 || res.Successes == 0 {
			t.Errorf("line %d: %+v, want %s at scale 64 with 16 calls in flight and some successes", i, res, policy)
		}
	}
}
