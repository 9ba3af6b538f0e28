package callstore

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

// copyStore copies a store fixture to a temporary directory (Open locks and
// may write).
func copyStore(t *testing.T, from string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{indexName, taName, bodyName} {
		b, err := os.ReadFile(filepath.Join(from, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// v1Fixture is the body the previous version's binary wrote for record i of
// testdata/v1store (100 records, t = 1000+10i, a = i, byte j = i+j).
func v1Fixture(i int) (out [BodySize]byte) {
	for j := range v1Body {
		out[j] = byte(i) + byte(j)
	}
	return out
}

// TestOpenV1Store: a store the previous version wrote (header SXCALLS1,
// 34-byte bodies) opens, reads its bodies zero-padded, takes new records
// (cut to its body size) and reopens.
func TestOpenV1Store(t *testing.T) {
	dir := copyStore(t, "testdata/v1store")
	s := openT(t, dir, smallOpts())
	if s.BodySize() != v1Body {
		t.Fatalf("BodySize %d, want %d", s.BodySize(), v1Body)
	}
	check := func(s *Store, n int) {
		t.Helper()
		msgs, err := s.AppendMessages(nil, 0, math.MaxInt64, 0, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != n {
			t.Fatalf("%d messages, want %d", len(msgs), n)
		}
		for i, m := range msgs[:100] {
			if m.T != int64(1000+10*i) || m.A != int64(i) || m.Body != v1Fixture(i) {
				t.Fatalf("message %d: t=%d a=%d body=%x", i, m.T, m.A, m.Body)
			}
		}
		if n > 100 {
			var want [BodySize]byte
			for j := range v1Body {
				want[j] = 0xAB
			}
			if msgs[100].Body != want {
				t.Fatalf("new record in a v1 store: body %x, want its first %d bytes kept", msgs[100].Body, v1Body)
			}
		}
	}
	check(s, 100)
	w, err := s.Writer()
	if err != nil {
		t.Fatal(err)
	}
	var full [BodySize]byte
	for j := range full {
		full[j] = 0xAB
	}
	if err := w.Put(5000, 1, full); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, smallOpts())
	defer s.Close()
	if s.BodySize() != v1Body {
		t.Fatalf("reopened BodySize %d, want %d", s.BodySize(), v1Body)
	}
	check(s, 101)
}

func TestNewStoreBodySize(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, smallOpts())
	w, _ := s.Writer()
	b := bodyFor(1, 2, 3)
	b[BodySize-1] = 0x5A
	if err := w.Put(1, 2, b); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, smallOpts())
	defer s.Close()
	if s.BodySize() != BodySize {
		t.Fatalf("BodySize %d, want %d", s.BodySize(), BodySize)
	}
	msgs, err := s.AppendMessages(nil, 0, math.MaxInt64, 0, math.MaxInt64)
	if err != nil || len(msgs) != 1 || msgs[0].Body != b {
		t.Fatalf("got %v %v", msgs, err)
	}
}

func TestHeaderBodySizeChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		bs   int
		ok   bool
	}{{"current", BodySize, true}, {"smaller", BodySize - 10, true}, {"zero", 0, false}, {"larger than this version reads", BodySize + 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var h [headerSize]byte
			encodeHeader(h[:], tc.bs)
			bs, err := checkHeader(h[:])
			if (err == nil) != tc.ok || (tc.ok && bs != tc.bs) {
				t.Fatalf("checkHeader: %d, %v", bs, err)
			}
		})
	}
	var h [headerSize]byte
	encodeHeaderV1(h[:])
	if bs, err := checkHeader(h[:]); err != nil || bs != v1Body {
		t.Fatalf("v1 header: %d, %v", bs, err)
	}
}
