package calllog

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFilesPrivate: under the usual umask (022) the gateway's call log
// (its directories, dictionaries, segment stores and bounds) is its
// user's only: directories 0700, files 0600. Calls name paths, hosts and
// endpoints.
func TestFilesPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "calls")
	l := open(t, dir, nil)
	base := time.Unix(1_800_000_000, 0)
	for i := range 10 {
		l.Record(rec("orders", base.Add(time.Duration(i)*time.Millisecond), time.Millisecond, "10.0.0.1:80", 200))
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		info, _ := d.Info()
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: %#o, want %#o", path, got, want)
		}
		return nil
	})
	if files < 3 {
		t.Fatalf("only %d files written", files)
	}
}
