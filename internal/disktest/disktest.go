// Package disktest gives tests a small file system of their own to fill:
// a tmpfs mounted for one test, and a file that leaves it nearly full. It
// owns no production code; the disk-full tests of the store, the write
// engine, the call log and the server use it.
package disktest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a temporary directory and unmounts
// it when the test ends; lazy detaches it even while files on it are still
// open (a store left open on purpose). It needs root (CI runs as root) and
// fails the test, never skips it, without.
func Tmpfs(t testing.TB, size int, lazy bool) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the disk-full tests mount a tmpfs and need root (euid %d)", os.Geteuid())
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		args := []string{dir}
		if lazy {
			args = []string{"-l", dir}
		}
		if out, err := exec.Command("umount", args...).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Free is the space free for an unprivileged writer on dir's file system.
func Free(t testing.TB, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// Fill writes a new file (filler, filler2, ...) in dir that leaves about
// leave bytes free on its file system, and returns its path: removing it
// gives the space back.
func Fill(t testing.TB, dir string, leave uint64) string {
	t.Helper()
	free := Free(t, dir)
	name := filepath.Join(dir, "filler")
	for i := 2; ; i++ {
		if _, err := os.Stat(name); err != nil {
			break
		}
		name = filepath.Join(dir, fmt.Sprintf("filler%d", i))
	}
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if free > leave {
		if _, err := f.Write(make([]byte, free-leave)); err != nil {
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	return name
}
