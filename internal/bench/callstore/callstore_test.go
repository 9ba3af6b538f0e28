package callstore

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/bench/report"
	"github.com/sextant-mesh/sextant/internal/callstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestResultKeys pins every JSON key "sextant bench callstore" prints:
// scripts and docs/benchmarks.md read them.
func TestResultKeys(t *testing.T) {
	if err := report.CompareKeys(Result{}, "testdata/result_keys.golden"); err != nil {
		t.Error(err)
	}
}

func TestRun(t *testing.T) {
	for _, wl := range []string{"demo", "random"} {
		t.Run(wl, func(t *testing.T) {
			var out bytes.Buffer
			cfg := Config{Dir: filepath.Join(t.TempDir(), "store"), Workload: wl, Records: 30_000,
				Writers: 3, Readers: 2, MsgQueries: 40, AvgQueries: 80, Seed: 1,
				Options: callstore.Options{ChunkRecords: 2048, BucketRecords: 256, WriterBatch: 64}}
			res, err := Run(context.Background(), cfg, &out)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Verified || res.Records != 30_000 || res.MsgRecords == 0 || res.AvgRecords == 0 || res.Score <= 0 {
				t.Fatalf("result %+v", res)
			}
			var decoded map[string]any
			if err := json.Unmarshal(out.Bytes(), &decoded); err != nil {
				t.Fatalf("output is not one JSON object: %v", err)
			}
			for _, k := range []string{"put_per_sec", "messages_per_sec", "avg_per_sec", "score", "verified"} {
				if _, ok := decoded[k]; !ok {
					t.Errorf("output lacks %s", k)
				}
			}
		})
	}
	if _, err := Run(context.Background(), Config{Dir: t.TempDir(), Workload: "nope", Records: 10, Writers: 1, Readers: 1}, &bytes.Buffer{}); err == nil {
		t.Fatal("bad workload accepted")
	}
}
