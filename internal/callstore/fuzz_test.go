package callstore

import (
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var (
	fuzzOnce sync.Once
	fuzzTA   []byte
	fuzzBody []byte
	fuzzIdx  []byte
)

// fuzzTemplate builds, once, a small deterministic store: one writer, a
// Sync in the middle. The fuzzer replaces its index file.
func fuzzTemplate(t testing.TB) {
	fuzzOnce.Do(func() {
		dir, err := os.MkdirTemp("", "callstore-fuzz")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := Open(dir, Options{ChunkRecords: 64, BucketRecords: 16, WriterBatch: 8, MaxBufferedRecords: 64})
		if err != nil {
			t.Fatal(err)
		}
		w, _ := s.Writer()
		for i := range int64(200) {
			if i == 130 {
				s.Sync()
			}
			w.Put(i*5, (i*7919)%301-150, bodyFor(i*5, 0, 0))
		}
		s.Close()
		fuzzTA, _ = os.ReadFile(filepath.Join(dir, taName))
		fuzzBody, _ = os.ReadFile(filepath.Join(dir, bodyName))
		fuzzIdx, _ = os.ReadFile(filepath.Join(dir, indexName))
	})
}

// FuzzOpen feeds arbitrary index files (with real data files) to Open:
// it must never panic, and a store it opens must answer or report
// corruption, never crash.
func FuzzOpen(f *testing.F) {
	fuzzTemplate(f)
	f.Add(fuzzIdx)
	f.Add(fuzzIdx[:len(fuzzIdx)-50])
	f.Add(fuzzIdx[:headerSize])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, idx []byte) {
		dir := t.TempDir()
		for name, b := range map[string][]byte{indexName: idx, taName: fuzzTA, bodyName: fuzzBody} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s, err := Open(dir, Options{})
		if err != nil {
			return
		}
		defer s.Close()
		got, err := s.Messages(math.MinInt64, math.MaxInt64, math.MinInt64, math.MaxInt64)
		if err == nil && uint64(len(got)) != s.Len() {
			t.Fatalf("full query %d records, Len %d", len(got), s.Len())
		}
		s.AvgValue(-100, 100, 0, 500)
		w, err := s.Writer()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Put(math.MaxInt64, 1, [BodySize]byte{}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzOpen from the template
// (CALLSTORE_WRITE_CORPUS=1); the files must match the template's data.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("CALLSTORE_WRITE_CORPUS") == "" {
		t.Skip("set CALLSTORE_WRITE_CORPUS=1 to regenerate")
	}
	fuzzTemplate(t)
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	os.MkdirAll(dir, 0o755)
	torn := append([]byte(nil), fuzzIdx...)
	torn[len(torn)-3*entrySize+7] ^= 1
	for name, b := range map[string][]byte{
		"valid":         fuzzIdx,
		"torn-sync":     fuzzIdx[:len(fuzzIdx)-40],
		"unsynced-tail": fuzzIdx[:len(fuzzIdx)-entrySize],
		"flipped-tail":  torn,
		"header-only":   fuzzIdx[:headerSize],
		"short-header":  fuzzIdx[:5],
		"entry-garbage": append(append([]byte(nil), fuzzIdx[:headerSize]...), make([]byte, 3*entrySize)...),
	} {
		content := "go test fuzz v1\n[]byte(" + quoteBytes(b) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func quoteBytes(b []byte) string {
	const hex = "0123456789abcdef"
	out := []byte{'"'}
	for _, c := range b {
		out = append(out, '\\', 'x', hex[c>>4], hex[c&15])
	}
	return string(append(out, '"'))
}
