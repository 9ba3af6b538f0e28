package callstore

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCrashChild is the child of TestCrashKill: it puts records t = i,
// a = i%1000, prints "synced N" after every Sync, and runs until killed
// (or 20 s, so an orphan cannot live on).
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("CALLSTORE_CRASH_DIR")
	if dir == "" {
		t.Skip("child of TestCrashKill")
	}
	s, err := Open(dir, Options{ChunkRecords: 1024, BucketRecords: 128, WriterBatch: 64})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	w, _ := s.Writer()
	deadline := time.Now().Add(20 * time.Second)
	for i := int64(0); time.Now().Before(deadline); i++ {
		if err := w.Put(i, i%1000, bodyFor(i, i%1000, 0)); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		if (i+1)%3000 == 0 {
			if err := s.Sync(); err != nil {
				fmt.Println("error", err)
				os.Exit(2)
			}
			fmt.Printf("synced %d\n", i+1)
		}
	}
	os.Exit(3)
}

// TestCrashKill kills a writing process with SIGKILL after it has synced,
// then checks every synced record is there and nothing is corrupt.
func TestCrashKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	for round := range 3 {
		t.Run(strconv.Itoa(round), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "CALLSTORE_CRASH_DIR="+dir)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			synced := int64(0)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				if n, ok := strings.CutPrefix(line, "synced "); ok {
					synced, _ = strconv.ParseInt(n, 10, 64)
					if synced >= int64(3000*(round+2)) {
						break
					}
				} else if strings.HasPrefix(line, "error") {
					t.Fatal(line)
				}
			}
			// Kill mid-write: after the sync, a little later each round.
			time.Sleep(time.Duration(round) * 3 * time.Millisecond)
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if synced == 0 {
				t.Fatal("child never synced")
			}
			s := openT(t, dir, Options{})
			defer s.Close()
			got, err := s.Messages(math.MinInt64, math.MaxInt64, math.MinInt64, math.MaxInt64)
			if err != nil {
				t.Fatalf("after crash: %v", err)
			}
			if int64(len(got)) < synced {
				t.Fatalf("after crash: %d records, synced %d", len(got), synced)
			}
			for i, m := range got {
				if m.T != int64(i) || m.A != m.T%1000 || m.Body != bodyFor(m.T, m.A, 0) {
					t.Fatalf("record %d = %+v", i, m)
				}
			}
			if _, err := s.AvgValue(0, 999, 0, math.MaxInt64); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// buildTwoSyncs makes a store whose index ends: chunks, sync, chunks, sync.
// It returns the record count and how many the last Sync added.
func buildTwoSyncs(t *testing.T, dir string) (total, tail int) {
	t.Helper()
	s := openT(t, dir, smallOpts())
	w, _ := s.Writer()
	for i := range int64(2000) {
		if i == 1500 {
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Put(i, i%100, bodyFor(i, i%100, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return 2000, 500
}

func TestTornTail(t *testing.T) {
	flip := func(name string, off int64) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			p := filepath.Join(dir, name)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if off < 0 {
				off += int64(len(b))
			}
			b[off] ^= 0x5a
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	shrink := func(name string, by int64) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			p := filepath.Join(dir, name)
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, st.Size()-by); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendGarbage := func(t *testing.T, dir string) {
		f, err := os.OpenFile(filepath.Join(dir, indexName), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.Write([]byte(strings.Repeat("garbage!", 20)))
	}
	both := func(fs ...func(*testing.T, string)) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			for _, f := range fs {
				f(t, dir)
			}
		}
	}
	tests := []struct {
		name     string
		damage   func(t *testing.T, dir string)
		openErr  error
		queryErr error
		// minimum records left; -1: all of them
		minLeft int
	}{
		{"garbage after index", appendGarbage, nil, nil, -1},
		{"torn last sync entry", shrink(indexName, 40), nil, nil, -1},
		{"unsynced chunk, body bit flip", both(shrink(indexName, entrySize), flip(bodyName, -1)), nil, nil, 1500},
		{"unsynced chunk, ta cut", both(shrink(indexName, entrySize), shrink(taName, 7)), nil, nil, 1500},
		{"unsynced chunk, body cut", both(shrink(indexName, entrySize), shrink(bodyName, 100)), nil, nil, 1500},
		{"unsynced entry torn", shrink(indexName, entrySize+30), nil, nil, 1500},
		{"synced entry corrupt", flip(indexName, headerSize+5), ErrCorrupt, nil, 0},
		{"synced data missing", shrink(bodyName, 1), ErrCorrupt, nil, 0},
		{"bad header", flip(indexName, 2), ErrCorrupt, nil, 0},
		{"synced ta bit flip", flip(taName, 3), nil, ErrCorrupt, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			total, _ := buildTwoSyncs(t, dir)
			tc.damage(t, dir)
			s, err := Open(dir, smallOpts())
			if tc.openErr != nil {
				if !errors.Is(err, tc.openErr) {
					t.Fatalf("Open = %v, want %v", err, tc.openErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			got, err := s.Messages(math.MinInt64, math.MaxInt64, math.MinInt64, math.MaxInt64)
			if tc.queryErr != nil {
				s.Close()
				if !errors.Is(err, tc.queryErr) {
					t.Fatalf("Messages = %v, want %v", err, tc.queryErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tc.minLeft
			if want < 0 {
				want = total
			}
			if len(got) < want || len(got) > total {
				t.Fatalf("%d records left, want [%d, %d]", len(got), want, total)
			}
			for i, m := range got {
				if m.T != int64(i) || m.Body != bodyFor(m.T, m.A, 0) {
					t.Fatalf("record %d = %+v", i, m)
				}
			}
			// Writing after the cut and reopening again keeps it consistent.
			w, _ := s.Writer()
			if err := w.Put(1<<40, 7, bodyFor(1<<40, 7, 0)); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openT(t, dir, smallOpts())
			defer s.Close()
			again, err := s.Messages(math.MinInt64, math.MaxInt64, math.MinInt64, math.MaxInt64)
			if err != nil || len(again) != len(got)+1 {
				t.Fatalf("reopen after cut: %d records, %v; want %d", len(again), err, len(got)+1)
			}
		})
	}
}
