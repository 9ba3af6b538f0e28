package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/store"
)

// crashImage commits n acknowledged (fsynced) commits of one record each
// into a store and copies its directory while it is still open, as a
// kill -9 leaves it: every commit is in the newest write-ahead log, none in
// a table. It returns the copy and the log's path in it.
func crashImage(t *testing.T, n int) (string, string) {
	t.Helper()
	return crashImageWith(t, n, 0)
}

// crashImageWith is crashImage whose last commit holds big bytes more (a
// record of several chunks when over a block).
func crashImageWith(t *testing.T, n, big int) (string, string) {
	t.Helper()
	live := t.TempDir()
	s, err := Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 1; i <= n; i++ {
		v := fmt.Sprintf("%0200d", i)
		if i == n {
			v += strings.Repeat("b", big)
		}
		res, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, fmt.Sprintf("i%04d", i), v)}}}, true)
		if err != nil || res[0].Revision != int64(i) {
			t.Fatalf("commit %d: %v %v", i, res, err)
		}
	}
	image := t.TempDir()
	entries, err := os.ReadDir(live)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(live, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(image, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wal, _, err := newestWAL(image)
	if err != nil || wal == "" {
		t.Fatalf("no write-ahead log in %s: %v", image, err)
	}
	return image, wal
}

// TestWALDamageBeforeTail: 16 bytes flipped in the middle of the newest
// log stop the open with an error naming the log and the offset, and what
// would be lost; --repair cuts the log there and says what it dropped.
// Before the check pebble opened it "fine" with every commit after the
// damage gone.
func TestWALDamageBeforeTail(t *testing.T) {
	const n = 600
	dir, wal := crashImage(t, n)
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	at := len(b)/2 + 100 // inside a record
	for i := at; i < at+16; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(wal, b, 0o644); err != nil {
		t.Fatal(err)
	}

	_, err = Open(dir)
	var damage *WALDamageError
	if !errors.As(err, &damage) {
		t.Fatalf("open of a log damaged in the middle: %v, want a WALDamageError", err)
	}
	msg := err.Error()
	if damage.File != wal || !strings.Contains(msg, wal) || !strings.Contains(msg, fmt.Sprintf("offset %d", damage.Offset)) {
		t.Fatalf("error does not name the log and the offset: %v", err)
	}
	// The damaged chunk starts at most one record (~230 bytes) before the
	// first flipped byte.
	if damage.Offset > int64(at) || damage.Offset < int64(at)-512 || damage.Cut > damage.Offset {
		t.Fatalf("damage reported at offset %d, bytes flipped at %d", damage.Offset, at)
	}
	if damage.LastLost != n || damage.Lost < n/4 || damage.FirstLost < 2 || damage.FirstLost > int64(n-damage.Lost+1) {
		t.Fatalf("lost %d commits, revisions %d..%d; want the ones after the damage up to %d", damage.Lost, damage.FirstLost, damage.LastLost, n)
	}
	t.Logf("refused: %v", err)

	s, err := OpenWith(dir, Options{Repair: true})
	if err != nil {
		t.Fatalf("open with repair: %v", err)
	}
	defer s.Close()
	r := s.Repaired()
	if r == nil || r.File != wal || r.LastLost != n || r.Lost != damage.Lost || r.Cut != damage.Cut {
		t.Fatalf("repair report %+v, want the damage %+v", r, damage)
	}
	t.Logf("repaired: %v", r)
	got, rev := load(t, s)
	// The first revision lost follows the last one kept.
	if rev != damage.FirstLost-1 || len(got) != int(rev) {
		t.Fatalf("after repair: revision %d with %d records, want just below %d", rev, len(got), damage.FirstLost)
	}
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Instances, "after", "x")}}}, true); err != nil {
		t.Fatalf("commit after repair: %v", err)
	}
}

// TestWALTornTail: a log whose last record is cut short (a crash in the
// middle of its write) opens, with every whole record kept.
func TestWALTornTail(t *testing.T) {
	const n = 300
	dir, wal := crashImage(t, n)
	fi, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(wal, fi.Size()-5); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("open with a torn tail: %v", err)
	}
	defer s.Close()
	got, rev := load(t, s)
	if rev != n-1 || len(got) != n-1 {
		t.Fatalf("torn tail: revision %d with %d records, want %d: only the torn record dropped", rev, len(got), n-1)
	}
}

// TestWALIntact: a crash image whose log is whole opens with everything,
// and a check of it finds nothing.
func TestWALIntact(t *testing.T) {
	const n = 100
	dir, _ := crashImage(t, n)
	if r, err := checkWAL(dir, true); r != nil || err != nil {
		t.Fatalf("check of an intact log: %v %v", r, err)
	}
	s := reopen(t, dir)
	if got, rev := load(t, s); rev != n || len(got) != n {
		t.Fatalf("revision %d with %d records, want %d", rev, len(got), n)
	}
}

// TestWALTornTailOfSeveralChunks: a last record of several chunks whose
// last chunk a crash cut short, or never wrote, is a torn tail too: its
// first chunks, whole, are not "valid data after the damage".
func TestWALTornTailOfSeveralChunks(t *testing.T) {
	const n = 50
	for _, cut := range []string{"in its last chunk", "before its last chunk"} {
		t.Run(cut, func(t *testing.T) {
			dir, wal := crashImageWith(t, n, 100<<10)
			fi, err := os.Stat(wal)
			if err != nil {
				t.Fatal(err)
			}
			size := fi.Size() - 100
			if cut == "before its last chunk" {
				size = (fi.Size() - 1) / walBlock * walBlock // chunks never cross a block
			}
			if err := os.Truncate(wal, size); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err != nil {
				t.Fatalf("open with a torn record of several chunks: %v", err)
			}
			defer s.Close()
			if got, rev := load(t, s); rev != n-1 || len(got) != n-1 {
				t.Fatalf("torn tail: revision %d with %d records, want %d", rev, len(got), n-1)
			}
		})
	}
}

// walChunk encodes one chunk of log logNum (typ 5 full ... 8 last).
func walChunk(typ byte, logNum uint32, payload []byte) []byte {
	b := make([]byte, walHeader+len(payload))
	binary.LittleEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6] = typ
	binary.LittleEndian.PutUint32(b[7:], logNum)
	copy(b[walHeader:], payload)
	binary.LittleEndian.PutUint32(b[0:], maskedCRC(b[6:]))
	return b
}

// TestWALPayloadPosingAsChunks: after a torn tail, a recycled log's older
// bytes may hold a user's value verbatim, and a value can be made of valid
// chunks of any log number. Only a later block's start counts as proof of
// damage before the tail, so such a value cannot refuse a healthy start;
// a real chunk of the log at a later block's start still does.
func TestWALPayloadPosingAsChunks(t *testing.T) {
	const logNum = 7
	data := make([]byte, 2*walBlock)
	copy(data, walChunk(chunkFull, logNum, []byte("kept")))
	// Torn after it; then, mid-block, old payload posing as chunks.
	for p := 200; p+64 < walBlock; p += 64 {
		copy(data[p:], walChunk(chunkFull, logNum, []byte("posing")))
	}
	if d := inspectWAL(data, logNum); d != nil {
		t.Fatalf("payload posing as chunks mid-block was taken for damage: %+v", d)
	}
	// A chunk of this log starting the next block is real: damage.
	copy(data[walBlock:], walChunk(chunkFull, logNum, []byte("later")))
	if d := inspectWAL(data, logNum); d == nil || d.Lost != 1 || d.Offset != int64(walHeader+4) {
		t.Fatalf("a later block's chunk after the damage: %+v, want damage at %d with 1 commit after it", d, walHeader+4)
	}
}
