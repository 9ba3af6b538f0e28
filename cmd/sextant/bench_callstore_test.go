package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// printedKeys decodes one JSON object and returns its keys, sorted.
func printedKeys(t *testing.T, line []byte) []string {
	t.Helper()
	var got map[string]json.RawMessage
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, line)
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	})
}

// goldenKeys reads the keys a scenario package pins in its testdata.
func goldenKeys(t *testing.T, pkg string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../internal/bench", pkg, "testdata/result_keys.golden"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestBenchCallstoreFlags runs "bench callstore" with every flag, tiny, and
// checks that it prints one JSON object with the keys scripts read and that
// every answer was checked.
func TestBenchCallstoreFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	cmd := newBenchCallstoreCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--dir", dir, "--workload", "random", "--records", "6000", "--writers", "2", "--readers", "2",
		"--msg-queries", "10", "--avg-queries", "20", "--seed", "7", "--chunk-records", "1024", "--bucket-records", "128",
		"--max-buffered", "20000", "--cpuprofile", prof})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got, want := printedKeys(t, out.Bytes()), goldenKeys(t, "callstore"); !slices.Equal(got, want) {
		t.Errorf("printed keys %q, want %q", got, want)
	}
	var res struct {
		Workload string `json:"workload"`
		Records  int64  `json:"records"`
		Verified bool   `json:"verified"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Workload != "random" || res.Records != 6000 || !res.Verified {
		t.Errorf("result %+v, want 6000 random records, verified", res)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("store dir left behind without --keep (stat: %v)", err)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("no CPU profile written: %v", err)
	}
}
