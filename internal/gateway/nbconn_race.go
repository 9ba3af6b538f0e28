//go:build race

package gateway

import (
	"errors"
	"syscall"
)

// Under the race detector, sysRead and sysWrite are syscall's Read and
// Write: those tell the detector that a write happens before the read of
// its bytes (at the other end of a socket, say), which raw system calls
// would not, so that tests keep that order.
func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return n, errnoOf(err)
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	return n, errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if err != nil && !errors.As(err, &e) {
		return syscall.EIO
	}
	return e
}
