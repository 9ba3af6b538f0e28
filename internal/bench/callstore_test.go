package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/sextant-mesh/sextant/internal/callstore"
)

func TestRunCallstore(t *testing.T) {
	for _, wl := range []string{"demo", "random"} {
		t.Run(wl, func(t *testing.T) {
			var out bytes.Buffer
			cfg := CallstoreConfig{Dir: filepath.Join(t.TempDir(), "store"), Workload: wl, Records: 30_000,
				Writers: 3, Readers: 2, MsgQueries: 40, AvgQueries: 80, Seed: 1,
				Options: callstore.Options{ChunkRecords: 2048, BucketRecords: 256, WriterBatch: 64}}
			res, err := RunCallstore(context.Background(), cfg, &out)
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
	if _, err := RunCallstore(context.Background(), CallstoreConfig{Dir: t.TempDir(), Workload: "nope", Records: 10, Writers: 1, Readers: 1}, &bytes.Buffer{}); err == nil {
		t.Fatal("bad workload accepted")
	}
}
