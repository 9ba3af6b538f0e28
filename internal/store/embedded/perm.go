package embedded

import (
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/vfs"
)

// privateFS is pebble's file system with the store's files private to the
// server's user. Pebble creates files 0666 and directories 0755, less the
// umask (0644 and 0755 under the usual 022); the store holds every record,
// TLS secrets and the mesh CA's key among them. Each file pebble creates is
// made 0600 at once, each directory 0700. (The data directory itself is
// 0700 too, so no other user could reach a file in the moment between its
// creation and its chmod.)
type privateFS struct{ vfs.FS }

const (
	fileMode = 0o600
	dirMode  = 0o700
)

func private(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(name, fileMode); err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded: make %s private: %w", name, err)
	}
	return f, nil
}

func (fs privateFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	return private(name, f, err)
}

func (fs privateFS) OpenReadWrite(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, opts...)
	return private(name, f, err)
}

func (fs privateFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname)
	return private(newname, f, err)
}

func (fs privateFS) Lock(name string) (io.Closer, error) {
	c, err := fs.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(name, fileMode); err != nil {
		c.Close()
		return nil, fmt.Errorf("embedded: make %s private: %w", name, err)
	}
	return c, nil
}

func (fs privateFS) MkdirAll(dir string, _ os.FileMode) error {
	return fs.FS.MkdirAll(dir, dirMode)
}
