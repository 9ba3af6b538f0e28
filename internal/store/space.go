package store

import (
	"errors"
	"fmt"
)

var (
	// ErrNoSpace is wrapped by the error of a write refused because the
	// store's disk is (nearly) full: nothing was written, and the write may
	// be retried once space is freed.
	ErrNoSpace = errors.New("store: not enough disk space")
	// ErrWriteFailed is wrapped by the errors of a store whose disk failed a
	// write (the log's write or fsync): the write that met it may or may not
	// be stored, and the store takes no more writes until it is opened
	// again.
	ErrWriteFailed = errors.New("store: write failed")
)

// SpaceError is a write refused for lack of disk space.
type SpaceError struct {
	Dir     string // the data directory
	Free    uint64 // bytes free for the store on its file system
	Reserve uint64 // bytes the store keeps free
	// ReadOnly is set while the store is open read-only: it was opened (or
	// fell back) without room for its log replay.
	ReadOnly bool
}

func (e *SpaceError) Error() string {
	mode := ""
	if e.ReadOnly {
		mode = " (the store is open read-only until then)"
	}
	return fmt.Sprintf("store: not enough disk space: the data directory %s has %s (%d bytes) free, below the %s the store keeps free; "+
		"writes are refused and resume by themselves once space is freed%s", e.Dir, Bytes(e.Free), e.Free, Bytes(e.Reserve), mode)
}

func (e *SpaceError) Unwrap() error { return ErrNoSpace }

// Bytes formats n bytes for people (binary units).
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
