package main

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// prepareDataDir creates the server's data directory 0700, or makes an
// existing one private: it holds the store, TLS private keys and the mesh
// CA's key among its records. A directory (or a file in it) that other
// users could read, as the server made them before, is tightened; the log
// says so when files were exposed (an empty directory exposed nothing).
func prepareDataDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	var dirs, files int
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 || !(d.IsDir() || d.Type().IsRegular()) {
			return nil // not ours to change
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 == 0 {
			return nil
		}
		mode := os.FileMode(0o600)
		if d.IsDir() {
			mode, dirs = 0o700, dirs+1
		} else {
			files++
		}
		return os.Chmod(path, info.Mode().Perm()&^0o077|mode&0o700)
	})
	if err != nil {
		return fmt.Errorf("make data directory %s private: %w", dir, err)
	}
	if files > 0 {
		log.Warn("the data directory was readable by other users: made it private (directories 0700, files 0600)",
			"data", dir, "directories", dirs, "files", files)
	}
	return nil
}
