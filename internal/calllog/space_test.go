package calllog

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/disktest"
)

// TestFullDisk: on a full disk the log neither stops nor keeps the calls it
// cannot write: each failed flush drops its calls, counted (every call is
// written or dropped), and leaves no empty segments behind; once space is
// freed it writes again, without a restart. Before, the calls of a failed
// flush stayed pending and grew with every flush (80,000 after 16 failed
// flushes here), none counted as dropped.
func TestFullDisk(t *testing.T) {
	mnt := disktest.Tmpfs(t, 8<<20, false)
	filler := disktest.Fill(t, mnt, 1<<20)
	l := open(t, filepath.Join(mnt, "log"), nil)
	defer l.Close()
	start := time.Now()
	total, failures := 0, 0
	round := func() error {
		for i := range 5000 {
			r := rec("svc", start.Add(time.Duration(total)*time.Microsecond), time.Millisecond, "a:1", 200)
			r.Path = fmt.Sprintf("/p/%d", total+i) // a new name each: the dictionary grows too
			l.Record(r)
		}
		total += 5000
		err := l.Flush()
		w, d := l.Counts()
		if w+d != uint64(total) {
			t.Fatalf("after %d calls: written %d + dropped %d (flush: %v)", total, w, d, err)
		}
		if n := len(l.parts["svc"].pending); n != 0 {
			t.Fatalf("%d calls still held after a flush (%v)", n, err)
		}
		return err
	}
	for range 20 {
		if round() != nil {
			failures++
		}
	}
	if failures < 10 {
		t.Fatalf("%d of 20 flushes of 5,000 calls into 1 MiB failed", failures)
	}
	segs, _ := filepath.Glob(filepath.Join(mnt, "log", "svc", "seg-*"))
	if len(segs) > 3 {
		t.Fatalf("%d segments after %d failed flushes: empty ones left behind", len(segs), failures)
	}
	w0, d0 := l.Counts()
	t.Logf("full: written %d, dropped %d, %d failed flushes, %d segments", w0, d0, failures, len(segs))

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := round(); err != nil {
		t.Fatalf("flush once space is freed: %v", err)
	}
	if w, _ := l.Counts(); w != w0+5000 {
		t.Fatalf("written %d once space is freed, want %d", w, w0+5000)
	}
}
