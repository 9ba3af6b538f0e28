package embedded

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestOrphanTablesDeleted: tables no version names (what a replay that
// failed half-way, out of space, left behind) are deleted by the next open
// for writing, not kept filling the disk.
func TestOrphanTablesDeleted(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "000999.sst")
	if err := os.WriteFile(orphan, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	reopen(t, dir)
	// Pebble deletes obsolete files in the background: a bounded poll.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(orphan); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("orphan table still there 20 s after an open for writing")
		}
	}
}
