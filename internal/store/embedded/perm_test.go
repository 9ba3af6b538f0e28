package embedded

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sextant-mesh/sextant/internal/store"
)

// TestFilesPrivate: under the usual umask (022) every file the store
// writes is 0600 and its directory 0700 (pebble alone makes them 0644 and
// 0755): the store holds TLS private keys and the mesh CA's key.
func TestFilesPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{put(store.Secrets, "default/k", "key")}}}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		info, _ := d.Info()
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: %#o, want %#o", path, got, want)
		}
		n++
		return nil
	})
	if n < 5 {
		t.Fatalf("only %d entries", n)
	}
}
